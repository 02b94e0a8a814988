/** Every attestor probe, in the order they run. */
import type { Probe } from "../probe.js";
import { approvalRefusals, grantsListing, tokenGrantClaims } from "./authority.js";
import { jwksCache, jwksShape, openIdCache, openIdValues } from "./discovery.js";
import {
  pollUnknown,
  startBadPubkey,
  startCallbackNotLoopback,
  startDidMismatch,
  startLabelTooLong,
  startMissingFields,
  startValid,
} from "./link.js";
import { scopeWithinGrant } from "./oauth.js";
import { jwtClaims, jwtVerifies, mintResponse, replay, unlinked, unsigned } from "./token.js";

export const attestorProbes: readonly Probe[] = [
  jwksShape,
  jwksCache,
  openIdValues,
  openIdCache,
  startMissingFields,
  startBadPubkey,
  startDidMismatch,
  startCallbackNotLoopback,
  startLabelTooLong,
  startValid,
  pollUnknown,
  unsigned,
  unlinked,
  replay,
  mintResponse,
  jwtVerifies,
  jwtClaims,
  tokenGrantClaims,
  grantsListing,
  approvalRefusals,
  scopeWithinGrant,
];
