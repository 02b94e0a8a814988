export { type RequestSpace, requestArbitrary } from "./generate.js";
export { judge } from "./oracle.js";
export {
  describeRequest,
  type FuzzRequest,
  type FuzzVocabulary,
  kindByPath,
  type RouteExample,
  type RouteKind,
  toBytes,
} from "./request.js";
export { type FuzzRoute, parseRouteTree, type RoutePrinter, routeKey, routesOf } from "./routes.js";
export {
  type FuzzFailure,
  type FuzzOptions,
  type FuzzReport,
  type FuzzTarget,
  formatReport,
  fuzzTarget,
} from "./runner.js";
export { header, type RawAnswer, type RawResult, sendRaw } from "./wire.js";
