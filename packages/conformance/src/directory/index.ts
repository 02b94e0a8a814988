/** Every directory probe, in the order they run. */
import type { Probe } from "../probe.js";
import {
  challengeMissingUrl,
  challengeNotHttps,
  challengeValid,
  challengeWrongPath,
  mirrorReadOnly,
} from "./challenge.js";
import {
  badFilter,
  badLimit,
  itemHeaders,
  itemReadProbe,
  itemUnknown,
  listHeaders,
  listRead,
  pagination,
  searchFilter,
  sitemap,
  statusFilter,
  tagFilter,
  tamperedCursor,
  updatedSinceFilter,
} from "./reads.js";

export const directoryProbes: readonly Probe[] = [
  listRead,
  listHeaders,
  pagination,
  badLimit,
  badFilter,
  tamperedCursor,
  tagFilter,
  searchFilter,
  statusFilter,
  updatedSinceFilter,
  itemReadProbe,
  itemHeaders,
  itemUnknown,
  sitemap,
  challengeMissingUrl,
  challengeNotHttps,
  challengeWrongPath,
  challengeValid,
  mirrorReadOnly,
];
