/**
 * The discovery document's `mcp` member, written from the service's protected resource: how an
 * agent that knows only the service's URL finds its MCP endpoint (docs/discovery-mcp.md).
 */
import { type DiscoveryDocument, validateDiscoveryDocument } from "@proto/protocol";

export interface AdvertisedResource {
  /** `{origin}{path}`: the RFC 8707 resource, every token's audience. */
  resource: string;
  path: string;
  /** The path-specific RFC 9728 metadata URL. */
  metadataUrl: string;
}

/**
 * Names the resource in `doc.mcp`, unless the document names an MCP endpoint already (the
 * publisher's own, or an earlier resource's: one per document). The absolute URL is written, as
 * clients name the resource by it; on a plain-http origin (development only) the path, since the
 * member takes https URLs or paths. Says whether it wrote the member.
 */
export function advertiseMcp(doc: DiscoveryDocument, resource: AdvertisedResource): boolean {
  if (doc.mcp !== undefined) return false;
  const https = resource.resource.startsWith("https://");
  const metadataPath = new URL(resource.metadataUrl).pathname;
  const mcp = https
    ? { url: resource.resource, resource_metadata: resource.metadataUrl }
    : { url: resource.path, resource_metadata: metadataPath };
  // The kit never serves a document that fails the schema, whatever a path held.
  const checked = validateDiscoveryDocument({ ...doc, mcp });
  if (!checked.valid) {
    throw new Error(
      `protectedResource: cannot name ${resource.resource} in the discovery document: ${checked.errors.map((e) => e.message).join("; ")}`,
    );
  }
  doc.mcp = mcp;
  return true;
}
