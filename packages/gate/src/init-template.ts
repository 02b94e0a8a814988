/**
 * The commented starting file `proto-gate init` writes. It parses as written (its values are
 * examples), so an operator edits service.did, service.public_url and upstream.url and starts; every
 * other key is shown with its default or, when it needs something of theirs (an environment
 * variable, an MCP server), commented out.
 */
export function initTemplate(): string {
  return TEMPLATE;
}

const TEMPLATE = `# proto-gate configuration: a verifying gateway in front of your application.
# Edit service.did, service.public_url and upstream.url; the rest works as it is.
# Check it, and whether the application answers, with: proto-gate check --config proto-gate.yaml
# Secrets never go in this file: keys ending in _env name environment variables that hold them.

service:
  # Your service's identity: the did:web of the public URL's host. A port is written %3A:
  # https://localhost:8443 is did:web:localhost%3A8443.
  did: did:web:notes.example.com
  # Your service in words, on the account and claim pages (1-60 characters; default: the host).
  name: Notes
  # The https origin agents call and sign: the address of the TLS proxy (nginx, Caddy) in front
  # of the gate, not the gate's own. An origin only: no path.
  public_url: https://notes.example.com
  # Development only: accept an http public_url on this machine (localhost, 127.0.0.0/8, [::1]).
  # Real agents call https only.
  allow_http: false
  # What an agent not yet claimed by its owner may do:
  #   free           - sign up and call with a signature alone
  #   attested_only  - sign up only with an attestation from an attestor below that a human is behind it
  #   denied         - nothing until claimed
  unclaimed_mode: attested_only
  # How owners may be invited to claim an agent: email, phone, oidc, did.
  # Default: [email, oidc] when mail is set below, [oidc] otherwise (email needs mail).
  recipient_types: [oidc]

# Where the gate listens. Behind a TLS proxy on the same machine, keep 127.0.0.1; in a container,
# 0.0.0.0. The environment variable PROTO_GATE_LISTEN_PORT overrides the port.
listen:
  host: 127.0.0.1
  port: 8080

# Your application. Every request the gate lets through goes here, with the caller in headers.
upstream:
  # http(s), optionally with a base path (http://127.0.0.1:8000/app); no query, no credentials.
  url: http://127.0.0.1:8000
  # No answer (status line) within this many seconds is a 504 (1-3600).
  timeout_seconds: 30

# The attestors whose attestations (a human is behind this agent) the gate accepts, by their
# issuer name. At least one, unless unclaimed_mode is free.
attestors:
  proto-trust:
    url: https://trust.example
    # display_name: Proto Trust    # shown on sign-in buttons (default: the URL's host)

# Accounts, keys and invitations. sqlite:PATH is relative to this file's directory; several
# replicas share postgres://user@host/db (the password in PGPASSWORD) and redis://.
store:
  database: sqlite:./proto-gate.db
  # redis_url: redis://127.0.0.1:6379    # replay protection and rate counters shared by replicas

# The TLS proxies in front whose X-Forwarded-For/-Proto/-Host the gate believes (IPs or CIDRs).
# List the proxy that connects to the gate, so the signed URL is rebuilt as the agent sent it.
trusted_proxies: [127.0.0.1]

# Permissions agents can be granted here (shown to owners when they approve). Routes and MCP
# paths below may require them. Names are lowercase segments: notes:read.
#   default: true              granted at sign-up
#   phishing_resistant: true   approving it needs a passkey
#   currency: EUR              a spending permission, amounts in EUR cents
permissions:
  notes:read:
    description: Read your notes
    default: true
  # notes:write:
  #   description: Write your notes

# Which requests need what, by path prefix; the first match wins, in this order. A path matches
# its prefix: /api/ matches /api/x; /api matches /api and /api/x but not /apix.
#   open      anyone; forwarded as is (no identity headers)
#   optional  anyone; an agent that signs is verified and recognised
#   agents    verified agents only
#   attested  verified agents whose request carries an attestation
# Paths no route matches are refused. Without routes: / for agents.
routes:
  - path: /static/
    methods: [GET, HEAD]
    access: open
  - path: /
    access: agents
    permissions: [notes:read]
    # Web Bot Auth agents without an account here: allow, challenge (default) or refuse.
    # On optional routes the default is allow.
    signed_agents: challenge

# MCP endpoints served as OAuth protected resources: MCP clients call them with a bearer token
# from an attestor above. Each scope must be a permission declared above.
# mcp:
#   - path: /mcp
#     scopes: [notes:read]

# How the claim links of e-mail invitations are mailed (needed for recipient_types email).
# mail:
#   smtp_url_env: SMTP_URL        # names the variable holding smtp://user:password@host:587
#   from: Notes <no-reply@notes.example.com>

# Sign the identity headers forwarded to the application (HMAC-SHA256), so it can tell they
# come from the gate. Needed unless the application listens on loopback only.
# identity:
#   secret_env: PROTO_GATE_SECRET    # names the variable holding the secret, at least 32 bytes

limits:
  # The largest body of a verified request, held while its signature is checked (1 KiB-1 GiB).
  max_body_bytes: 67108864

# proxy: the gate forwards requests to upstream. auth: it only answers the checks of nginx
# auth_request, Caddy forward_auth or Traefik forwardAuth, and the proxy forwards.
mode: proxy

# fatal, error, warn, info or debug.
log_level: info
`;
