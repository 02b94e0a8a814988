/** The discovery document probes (directory.md §Discovery document; upstream.md rule 1). */
import {
  checkAgentCompatibility,
  type DiscoveryDocument,
  didWebMatchesHost,
  resolveEndpoint,
  validateDiscoveryDocument,
  validateDiscoveryPermissions,
} from "@proto/protocol";
import { expectStatus, isObject, jsonObject } from "../checks.js";
import type { HttpResponse } from "../http.js";
import { check, type Probe, type ProbeContext, ProbeSkip, pass } from "../probe.js";

const SECTION = "directory.md §Discovery document; upstream.md 1";

export const discoveryUrl = (context: ProbeContext): string => `${context.baseUrl}/.well-known/proto`;

export const fetchDiscovery = (context: ProbeContext): Promise<HttpResponse> =>
  context.memo("discovery", () => context.http.get(discoveryUrl(context)));

/** What the agent probes need of the document: where accounts live and the signup posture. */
export interface ServiceShape {
  document: Record<string, unknown>;
  serviceDid: string | undefined;
  /** `{accounts}` resolved against the discovery origin. */
  accounts: string;
  /** `{accounts}/me`: introspection. */
  me: string;
  ownerInvitation: string | undefined;
  /** `billing.unclaimed_mode`, `free` when absent. */
  mode: string;
  recipientTypes: string[];
}

/**
 * Only what an agent needs to talk to the service; a document failing other rules is the document
 * probe's failure, not every probe's, so the agent probes run whenever accounts can be found.
 */
export const serviceShape = (context: ProbeContext): Promise<ServiceShape> =>
  context.memo("service-shape", async () => {
    const response = await fetchDiscovery(context);
    if (response.status !== 200 || !isObject(response.json)) {
      throw new ProbeSkip(`no usable discovery document (GET /.well-known/proto answered ${response.status})`);
    }
    const document = response.json;
    const endpoints = isObject(document.endpoints) ? document.endpoints : {};
    const resolve = (value: unknown): string | undefined => {
      if (typeof value !== "string") return undefined;
      try {
        return resolveEndpoint(discoveryUrl(context), value).href;
      } catch {
        return undefined;
      }
    };
    const accounts = resolve(endpoints.accounts);
    if (accounts === undefined) throw new ProbeSkip("the discovery document names no usable endpoints.accounts");
    const billing = isObject(document.billing) ? document.billing : {};
    return {
      document,
      serviceDid: typeof document.service_did === "string" ? document.service_did : undefined,
      accounts,
      me: `${accounts.replace(/\/+$/, "")}/me`,
      ownerInvitation: resolve(endpoints.owner_invitation),
      mode: typeof billing.unclaimed_mode === "string" ? billing.unclaimed_mode : "free",
      recipientTypes: Array.isArray(document.recipient_types)
        ? document.recipient_types.filter((t): t is string => typeof t === "string")
        : ["email"],
    };
  });

export const discoveryDocument: Probe = {
  id: "service.discovery.document",
  description: "/.well-known/proto is 200 JSON valid against the schema, proto_version 0.1, ed25519 offered",
  section: SECTION,
  async run(context) {
    const response = await fetchDiscovery(context);
    expectStatus(response, 200, "GET /.well-known/proto");
    check(
      /^application\/json\b/i.test(response.headers["content-type"] ?? ""),
      `GET /.well-known/proto: not application/json (content-type ${response.headers["content-type"] ?? "absent"})`,
      response.exchange,
    );
    const body = jsonObject(response, "the discovery document");
    const validation = validateDiscoveryDocument(body);
    check(
      validation.valid,
      `schema: ${validation.valid ? "" : validation.errors.map((e) => e.message).join("; ")}`,
      response.exchange,
    );
    const compatibility = checkAgentCompatibility(body);
    check(
      compatibility.compatible,
      `agent rules: ${compatibility.compatible ? "" : compatibility.reasons.join("; ")}`,
      response.exchange,
    );
    const document: DiscoveryDocument = validation.document;
    const host = new URL(context.baseUrl).host;
    if (document.service_did.startsWith("did:web:")) {
      check(
        didWebMatchesHost(document.service_did, host),
        `service_did ${document.service_did} does not name the discovery host ${host}`,
        response.exchange,
      );
    }
    // Signed endpoints: a path on the service host or an absolute https URL (upstream.md 1).
    for (const key of ["accounts", "owner_invitation", "claim_completion", "key_rotation"] as const) {
      const value = document.endpoints[key];
      if (value === undefined) continue;
      check(
        value.startsWith("/") || value.startsWith("https://"),
        `endpoints.${key} must be a path on the service host or an https URL, got ${JSON.stringify(value)}`,
        response.exchange,
      );
    }
    return pass();
  },
};

/**
 * The contract makes `accepted_attestors` optional, but an `attested_only` service that names none
 * refuses every signup: no agent can know which attestation to bring (upstream.md 10).
 */
export const discoveryBilling: Probe = {
  id: "service.discovery.billing",
  description: "a service using attestations publishes billing; attested_only names its accepted_attestors",
  section: "directory.md §Discovery document (billing, features); trust.md §What the service does; upstream.md 10",
  async run(context) {
    const response = await fetchDiscovery(context);
    expectStatus(response, 200, "GET /.well-known/proto");
    const body = jsonObject(response, "the discovery document");
    const features = Array.isArray(body.features) ? body.features : [];
    const billing = body.billing;
    const attested = isObject(billing) && billing.unclaimed_mode === "attested_only";
    if (!attested && !features.includes("attestation")) {
      return pass("the service does not use attestations (no attestation feature, not attested_only)");
    }
    check(isObject(billing), "features lists attestation but there is no billing object", response.exchange);
    check(
      typeof billing.unclaimed_mode === "string" &&
        ["free", "attested_only", "denied"].includes(billing.unclaimed_mode),
      `billing.unclaimed_mode must be free, attested_only or denied, got ${JSON.stringify(billing.unclaimed_mode)}`,
      response.exchange,
    );
    const attestors = billing.accepted_attestors;
    check(
      attestors === undefined ||
        (Array.isArray(attestors) && attestors.every((a) => typeof a === "string" && a.length > 0)),
      "billing.accepted_attestors must be a list of attestor issuers",
      response.exchange,
    );
    check(
      !attested || (Array.isArray(attestors) && attestors.length > 0),
      "attested_only without accepted_attestors: no agent can know which attestation a signup needs",
      response.exchange,
    );
    return pass();
  },
};

/**
 * The `permissions` member is optional: a service that declares none is served as before. When
 * present it is checked on its own, so a problem there is named even if the rest is also wrong.
 */
export const discoveryPermissions: Probe = {
  id: "service.discovery.permissions",
  description: "permissions, when declared, are valid: names, one-line descriptions, flags, currencies",
  section: "authority.md §The permissions member of the discovery document",
  async run(context) {
    const response = await fetchDiscovery(context);
    expectStatus(response, 200, "GET /.well-known/proto");
    const body = jsonObject(response, "the discovery document");
    if (body.permissions === undefined) return pass();
    const validation = validateDiscoveryPermissions(body.permissions);
    check(
      validation.valid,
      validation.valid ? "" : validation.errors.map((e) => e.message).join("; "),
      response.exchange,
    );
    return pass();
  },
};
