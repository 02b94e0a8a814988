/** The arbitrary of fuzzed requests over a target's routes. */
import fc from "fast-check";
import { type Mutation, mutationFor } from "./mutations.js";
import { BODY_METHODS, baseDraft, type FuzzRequest, type FuzzVocabulary, finish, type RouteKind } from "./request.js";
import type { FuzzRoute } from "./routes.js";

export interface RequestSpace {
  routes: FuzzRoute[];
  kindOf(route: FuzzRoute): RouteKind;
  vocabulary: FuzzVocabulary;
  /** `host:port` of the server (the Host header of a well-formed request). */
  host: string;
  /** Route keys whose requests the target can sign (a valid signature over a broken request). */
  signable: Set<string>;
}

export function requestArbitrary(space: RequestSpace): fc.Arbitrary<FuzzRequest> {
  if (space.routes.length === 0) throw new Error("no routes to fuzz");
  const withBody = mutationFor("POST", space.vocabulary);
  const withoutBody = mutationFor("GET", space.vocabulary);
  return fc.constantFrom(...space.routes).chain((route) =>
    fc
      .record({
        mutations: fc.oneof(
          { weight: 1, arbitrary: fc.constant<Mutation[]>([]) },
          {
            weight: 19,
            arbitrary: fc.array(BODY_METHODS.has(route.method) ? withBody : withoutBody, {
              minLength: 1,
              maxLength: 2,
            }),
          },
        ),
        session: fc.boolean(),
        sign: fc.boolean(),
      })
      .map(({ mutations, session, sign }) => {
        const build = (applied: Mutation[]): FuzzRequest => {
          const draft = baseDraft(route, space.kindOf(route), space.vocabulary, space.host);
          if (session && space.vocabulary.cookies.length > 0) {
            draft.cookies = [...space.vocabulary.cookies];
            draft.kinds.push("session");
          }
          for (const m of applied) {
            m.apply(draft);
            draft.kinds.push(m.kind);
          }
          if (sign && space.signable.has(`${route.method} ${route.url}`)) {
            draft.sign = true;
            draft.kinds.push("signed");
          }
          return finish(draft);
        };
        const request = build(mutations);
        // Each mutation alone, to tell which of two broke the server (built only when asked).
        return mutations.length > 1 ? { ...request, alone: () => mutations.map((m) => build([m])) } : request;
      }),
  );
}
