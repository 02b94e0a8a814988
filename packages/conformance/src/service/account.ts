/**
 * Signup without an attestation, the `Proto` challenge, the error envelope, and the owner
 * invitation (trust.md §Presentation, §Reserved codes; upstream.md 2 and 4).
 */
import { parseWwwAuthenticate, signRequest } from "@proto/protocol";
import { agentKeyFromPem, newAgentKey } from "../attestor/keys.js";
import { isObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeSkip, pass } from "../probe.js";
import { discoveryUrl, serviceShape } from "./discovery.js";
import { errorCode, expectNoAccount, expectRefusal, sendSigned } from "./signature.js";

const RESERVED = "trust.md §Reserved codes of services that accept attestations";

/** A signed signup without an attestation, then a signed introspection by the same key. */
const unattestedSignup = (context: ProbeContext) =>
  context.memo("unattested-signup", async () => {
    const shape = await serviceShape(context);
    if (shape.mode !== "attested_only") {
      throw new ProbeSkip(`unclaimed_mode is ${shape.mode}, not attested_only: a signup would create an account`);
    }
    const agent = newAgentKey();
    const signup = await sendSigned(context, agent, { method: "POST", url: shape.accounts });
    const me = await sendSigned(context, agent, { method: "GET", url: shape.me });
    return { signup, me };
  });

/**
 * Refused before any state change, so it runs without --write: a conforming service creates nothing.
 * (A service that wrongly created the account shows it on the introspection that follows.)
 */
export const signupAttestationRequired: Probe = {
  id: "service.signup.attestation-required",
  description:
    "attested_only: a signed signup without Proto-Attestation is 401 attestation_required and creates nothing",
  section: `trust.md §Presentation; ${RESERVED}`,
  async run(context) {
    const { signup, me } = await unattestedSignup(context);
    expectRefusal(signup, 401, "attestation_required", "signed POST {accounts} without an attestation");
    check(
      me.status !== 200 && me.status !== 201,
      `the refused signup created an account: GET {accounts}/me by the same key answered ${me.status}`,
      me.exchange,
    );
    expectNoAccount(me, "GET {accounts}/me after the refused signup");
    return pass();
  },
};

/** The 401s the challenge and envelope probes look at: unsigned, badly signed, and (attested_only) unattested. */
const unauthorizedAnswers = (context: ProbeContext) =>
  context.memo("unauthorized-answers", async () => {
    const shape = await serviceShape(context);
    const unsigned = await context.http.get(shape.me);
    // A request that tries the protocol with a signature no verifier can read.
    const badlySigned = await context.http.get(shape.me, {
      "signature-input": 'sig1=("@method" "@target-uri");alg="ed25519"',
      signature: "sig1=:AAAA:",
    });
    const unattested =
      shape.mode === "attested_only"
        ? await sendSigned(context, newAgentKey(), { method: "POST", url: shape.accounts })
        : undefined;
    return { shape, unsigned, badlySigned, unattested };
  });

function protoChallenge(response: HttpResponse): Record<string, string> {
  const value = response.headers["www-authenticate"];
  check(value !== undefined, `a ${response.status} without WWW-Authenticate`, response.exchange);
  const found = parseWwwAuthenticate(value).find((c) => c.scheme.toLowerCase() === "proto");
  check(found !== undefined, `WWW-Authenticate has no Proto challenge: ${value}`, response.exchange);
  // A URL is not an RFC 9110 token: its value must be quoted.
  check(
    /\bdiscovery\s*=\s*"/i.test(value),
    `the Proto challenge's discovery URL must be a quoted string: ${value}`,
    response.exchange,
  );
  return found.params;
}

export const challengeHeader: Probe = {
  id: "service.challenge.header",
  description:
    "every 401 carries WWW-Authenticate: Proto discovery=..., error= when the protocol was tried, attestors=",
  section: "upstream.md 4 (upstream core §5.7)",
  async run(context) {
    const { unsigned, badlySigned, unattested } = await unauthorizedAnswers(context);
    const discovery = discoveryUrl(context);
    const answers: [HttpResponse, string][] = [
      [unsigned, "unsigned GET {accounts}/me"],
      [badlySigned, "GET {accounts}/me with an unreadable signature"],
      ...(unattested === undefined ? [] : [[unattested, "unattested signup"] as [HttpResponse, string]]),
    ];
    for (const [response, what] of answers) {
      check(response.status === 401, `${what}: expected 401, got ${response.status}`, response.exchange);
      const params = protoChallenge(response);
      check(
        params.discovery === discovery,
        `${what}: the challenge's discovery must be ${discovery}, got ${JSON.stringify(params.discovery)}`,
        response.exchange,
      );
      const code = errorCode(response);
      if (response === unsigned) {
        check(
          params.error === undefined,
          `${what}: error= only when the request tried the protocol, got error=${params.error}`,
          response.exchange,
        );
      } else {
        check(
          params.error === code,
          `${what}: the challenge's error must be the answer's code ${String(code)}, got ${JSON.stringify(params.error)}`,
          response.exchange,
        );
      }
      if (code === "attestation_required" || code === "invalid_attestation") {
        check(params.attestors !== undefined, `${what}: ${code} needs attestors= in the challenge`, response.exchange);
      }
    }
    return pass();
  },
};

export const errorEnvelope: Probe = {
  id: "service.error.envelope",
  description: "error answers are application/json { error: { code, message } }",
  section: `${RESERVED} (same envelope shape)`,
  async run(context) {
    const { unsigned, badlySigned, unattested } = await unauthorizedAnswers(context);
    for (const response of [unsigned, badlySigned, ...(unattested === undefined ? [] : [unattested])]) {
      check(
        /^application\/json\b/i.test(response.headers["content-type"] ?? ""),
        `a ${response.status} that is not application/json (content-type ${response.headers["content-type"] ?? "absent"})`,
        response.exchange,
      );
      const error = isObject(response.json) ? response.json.error : undefined;
      check(isObject(error), "the body is not the error envelope { error: { code, message } }", response.exchange);
      check(
        typeof error.code === "string" && error.code.length > 0,
        "error.code must be a non-empty string",
        response.exchange,
      );
      check(
        typeof error.message === "string" && error.message.length > 0,
        "error.message must be a non-empty string",
        response.exchange,
      );
    }
    return pass();
  },
};

/** Recipient types of the contract; the first the service does not accept is the one sent. */
const RECIPIENT_TYPES = ["email", "phone", "oidc", "did"];

/** An attestation minted at `--attestor` by the `--agent-key` agent, for the service's DID. */
export async function mintAttestation(context: ProbeContext, did: string, pem: string, attestor: string) {
  const agent = agentKeyFromPem(pem);
  if (typeof agent === "string") throw new ProbeSkip(agent);
  const url = `${attestor.replace(/\/+$/, "")}/v1/token`;
  const body = JSON.stringify({ aud: did });
  const signed = signRequest(
    { method: "POST", url, body },
    { keyid: agent.did, privateKey: agent.privateKey, created: context.nowSeconds() },
  );
  const response = await context.http.request("POST", url, {
    body,
    headers: { "content-type": "application/json", ...signed.headers },
  });
  if (response.status !== 200 || !isObject(response.json) || typeof response.json.jwt !== "string") {
    throw new ProbeSkip(`the attestor did not mint an attestation for ${did} (${response.status})`);
  }
  return { agent, jwt: response.json.jwt };
}

/** An account for the run: signed up by the run's key, or by `--agent-key` with an attestation from `--attestor`. */
const account = (context: ProbeContext) =>
  context.memo("account", async () => {
    const shape = await serviceShape(context);
    if (shape.ownerInvitation === undefined) throw new ProbeSkip("the discovery document names no owner_invitation");
    let agent = newAgentKey();
    let headers: Record<string, string> = {};
    if (shape.mode === "attested_only") {
      const { agentKeyPem, attestorUrl } = context.options;
      if (agentKeyPem === undefined || attestorUrl === undefined || shape.serviceDid === undefined) {
        throw new ProbeSkip(
          "attested_only: an account needs an attestation, pass --agent-key FILE (a linked agent) and --attestor URL",
        );
      }
      const minted = await mintAttestation(context, shape.serviceDid, agentKeyPem, attestorUrl);
      agent = minted.agent;
      headers = { "proto-attestation": minted.jwt };
    }
    const signup = await sendSigned(context, agent, { method: "POST", url: shape.accounts, headers });
    if (signup.status !== 200 && signup.status !== 201) {
      // Not this probe's rule: a service may refuse unclaimed accounts (denied) or this agent.
      throw new ProbeSkip(
        `no account for the run: the signup answered ${signup.status} ${String(errorCode(signup) ?? "")}`.trimEnd(),
      );
    }
    return { shape, agent, ownerInvitation: shape.ownerInvitation };
  });

export const unsupportedRecipient: Probe = {
  id: "service.invitation.unsupported-recipient",
  description: "an owner invitation whose recipient type is not in recipient_types is 400 unsupported_recipient_type",
  section: `${RESERVED}; directory.md §Discovery document (recipient_types)`,
  writes: true,
  async run(context) {
    const { shape, agent, ownerInvitation } = await account(context);
    const type = RECIPIENT_TYPES.find((t) => !shape.recipientTypes.includes(t)) ?? "x-conformance";
    const response = await sendSigned(context, agent, {
      method: "POST",
      url: ownerInvitation,
      body: JSON.stringify({ recipient: { type, value: type === "phone" ? "+15555550100" : "conformance" } }),
    });
    expectRefusal(response, 400, "unsupported_recipient_type", `owner invitation to a ${type} recipient`);
    return pass();
  },
};

/** A recipient of each non-e-mail type, for invitations whose claim link comes back to the agent. */
const RECIPIENTS: Record<string, unknown> = {
  oidc: { issuer: "https://conformance.invalid", sub: "proto-conformance" },
  did: "did:web:owner.conformance.invalid",
  phone: "+15555550100",
};

/**
 * Two invitations for one account, the second replacing the first: the first's claim link then
 * answers 410 (`invitation_expired`, or `invitation_not_found` with 410). The agent sees the link
 * only for recipients that are not e-mail (whose link travels by mail alone), so the probe needs the
 * service to accept such a type and to return `claim_url`.
 */
export const invitationReplaced: Probe = {
  id: "service.invitation.replaced",
  description: "an invitation replaced by a second one answers 410 on its old claim link",
  section: `${RESERVED} (invitation_expired, invitation_not_found); upstream.md 2 (upstream core §7.3)`,
  writes: true,
  async run(context) {
    const { shape, agent, ownerInvitation } = await account(context);
    const type = Object.keys(RECIPIENTS).find((t) => shape.recipientTypes.includes(t));
    if (type === undefined) {
      throw new ProbeSkip(
        "the service takes only e-mail recipients: the old claim link travels by mail, the agent never sees it",
      );
    }
    const invite = () =>
      sendSigned(context, agent, {
        method: "POST",
        url: ownerInvitation,
        body: JSON.stringify({ recipient: { type, value: RECIPIENTS[type] } }),
      });
    const first = await invite();
    check(
      first.status === 202,
      `owner invitation to a ${type} recipient: expected 202, got ${first.status}`,
      first.exchange,
    );
    const claimUrl = isObject(first.json) ? first.json.claim_url : undefined;
    if (typeof claimUrl !== "string") {
      throw new ProbeSkip(
        "the invitation answer carries no claim_url: the service offers the agent no way to observe the old link",
      );
    }
    const second = await invite();
    check(second.status === 202, `the replacing invitation: expected 202, got ${second.status}`, second.exchange);
    const old = await context.http.get(claimUrl, { accept: "application/json" });
    const code = errorCode(old);
    check(
      old.status === 410 && (code === undefined || code === "invitation_expired" || code === "invitation_not_found"),
      `the replaced invitation's claim link: expected 410, got ${old.status}${code === undefined ? "" : ` ${String(code)}`}`,
      old.exchange,
    );
    return pass();
  },
};
