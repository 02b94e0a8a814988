/**
 * A token that does not hold a route's permission is refused (docs/authority.md, "Enforcement in
 * the kit"): 403 `insufficient_permission`, naming what is missing, with the `Proto` challenge
 * that tells the agent whom to ask.
 */
import { findProtoChallenge, isPermissionName, readGrantClaims } from "@proto/protocol";
import { decodeJwt } from "jose";
import { isObject } from "../checks.js";
import { check, type PermissionRoute, type Probe, ProbeSkip, pass } from "../probe.js";
import { redacted } from "../redact.js";
import { mintAttestation } from "./account.js";
import { serviceShape } from "./discovery.js";
import { errorCode, sendSigned } from "./signature.js";

const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;
/** A path is sent as given: bounded, no spaces, on the service's origin. */
const PATH = /^\/[^\s#]{0,2047}$/;

/** `METHOD /path permission` (`--permission-route`), or what is wrong with it. */
export function parsePermissionRoute(value: string): PermissionRoute | string {
  const parts = value.trim().split(/\s+/);
  if (parts.length !== 3) return `give METHOD /path permission, e.g. "DELETE /notes/x notes:delete" (got ${value})`;
  const [method = "", path = "", permission = ""] = parts;
  const upper = method.toUpperCase();
  const known = METHODS.find((m) => m === upper);
  if (known === undefined) return `the method must be one of ${METHODS.join(", ")} (got ${method})`;
  if (!PATH.test(path)) return `the path must start with / and have no space or fragment (got ${path})`;
  if (!isPermissionName(permission)) return `not a permission name: ${permission}`;
  return { method: known, path, permission };
}

/** The declaration of `name` in the discovery document, when the service declares it. */
function declaration(document: Record<string, unknown>, name: string): Record<string, unknown> | undefined {
  const permissions = document.permissions;
  if (!isObject(permissions) || !Object.hasOwn(permissions, name)) return undefined;
  const declared = permissions[name];
  return isObject(declared) ? declared : undefined;
}

const SKIP_WITHOUT =
  'needs --permission-route "METHOD /path permission" (a route needing a permission the linked agent lacks), --agent-key FILE and --attestor URL';

export const insufficientPermission: Probe = {
  id: "service.authority.insufficient-permission",
  description:
    "a route the agent's token holds no permission for is 403 insufficient_permission, naming it, with the Proto challenge",
  section: "authority.md §Enforcement in the kit (Permissions); §The claims a token carries",
  async run(context) {
    const { permissionRoute: route, agentKeyPem, attestorUrl } = context.options;
    if (route === undefined || agentKeyPem === undefined || attestorUrl === undefined)
      throw new ProbeSkip(SKIP_WITHOUT);
    const { method, path, permission } = route;
    if (method !== "GET" && !context.options.write) {
      throw new ProbeSkip(`${method} ${path} changes state if the service lets it through: run with --write`);
    }
    const shape = await serviceShape(context);
    if (shape.serviceDid === undefined) throw new ProbeSkip("the discovery document names no service_did to mint for");
    const declared = declaration(shape.document, permission);
    if (declared === undefined) {
      throw new ProbeSkip(`the discovery document declares no permission ${permission}: give one the service declares`);
    }
    if (declared.default === true) {
      throw new ProbeSkip(`${permission} is a default permission: an agent without a grant holds it`);
    }
    const { agent, jwt } = await mintAttestation(context, shape.serviceDid, agentKeyPem, attestorUrl);
    let held: string[] = [];
    try {
      held = readGrantClaims(decodeJwt(jwt))?.permissions ?? [];
    } catch (error) {
      // The attestor's fault, which its own probes report: nothing can be said of the service.
      throw new ProbeSkip(`the attestor's token has malformed grant claims (${String(error)})`);
    }
    if (held.includes(permission)) {
      throw new ProbeSkip(`the linked agent's grant holds ${permission}: the probe needs an agent without it`);
    }
    const attested = { "proto-attestation": jwt };
    // The agent's account, as an agent signs up before using the service (200 when it exists).
    const signup = await sendSigned(context, agent, { method: "POST", url: shape.accounts, headers: attested });
    if (signup.status !== 200 && signup.status !== 201) {
      throw new ProbeSkip(
        `the linked agent has no account: the signup answered ${signup.status} ${String(errorCode(signup) ?? "")}`.trimEnd(),
      );
    }
    const what = `${method} ${path} by an agent without ${permission}`;
    const response = redacted(
      await sendSigned(context, agent, { method, url: `${context.baseUrl}${path}`, headers: attested }),
    );
    const x = response.exchange;
    const code = errorCode(response);
    check(
      response.status === 403 && code === "insufficient_permission",
      `${what}: expected 403 insufficient_permission, got ${response.status} ${code === undefined ? "(no error code)" : String(code)}`,
      x,
    );
    const error = isObject(response.json) && isObject(response.json.error) ? response.json.error : {};
    const details = isObject(error.details) ? error.details : {};
    check(
      Array.isArray(details.missing) && details.missing.includes(permission),
      `${what}: error.details.missing must list ${permission}, got ${JSON.stringify(details.missing)}`,
      x,
    );
    check(
      details.audience === shape.serviceDid,
      `${what}: error.details.audience must be the service's DID ${shape.serviceDid}, got ${JSON.stringify(details.audience)}`,
      x,
    );
    const challenge = findProtoChallenge(response.headers["www-authenticate"]);
    check(challenge !== undefined, `${what}: no Proto challenge in WWW-Authenticate`, x);
    check(
      challenge.error === "insufficient_permission",
      `${what}: the challenge's error must be insufficient_permission, got ${JSON.stringify(challenge.error)}`,
      x,
    );
    check(
      challenge.permissions?.includes(permission) === true,
      `${what}: the challenge's permissions= must name ${permission}, got ${JSON.stringify(challenge.permissions?.join(" "))}`,
      x,
    );
    return pass();
  },
};
