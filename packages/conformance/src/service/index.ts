/** Every service probe, in the order they run. */
import type { Probe } from "../probe.js";
import {
  challengeHeader,
  errorEnvelope,
  invitationReplaced,
  signupAttestationRequired,
  unsupportedRecipient,
} from "./account.js";
import { insufficientPermission } from "./authority.js";
import { discoveryBilling, discoveryDocument, discoveryPermissions } from "./discovery.js";
import {
  expiredSignature,
  extraCarriedComponent,
  extraComponent,
  futureCreated,
  missingDigest,
  missingTargetUri,
  replayedNonce,
  signatureAccepted,
  validityTooLong,
  wrongDigest,
  wrongTargetUri,
} from "./signature.js";

export const serviceProbes: readonly Probe[] = [
  discoveryDocument,
  discoveryBilling,
  discoveryPermissions,
  signatureAccepted,
  missingDigest,
  missingTargetUri,
  extraComponent,
  extraCarriedComponent,
  wrongDigest,
  validityTooLong,
  expiredSignature,
  futureCreated,
  wrongTargetUri,
  replayedNonce,
  signupAttestationRequired,
  challengeHeader,
  errorEnvelope,
  unsupportedRecipient,
  invitationReplaced,
  insufficientPermission,
];
