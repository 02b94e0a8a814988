import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { loadVectors } from "@proto/testkit";
import { ProtoError } from "../src/errors.js";
import { createRequestVerifier } from "../src/http-signatures/verify.js";
import { MemoryNonceStore } from "../src/nonce-store.js";
import { type SignatureVector, vectorHeaders } from "./helpers.js";

const { vectors, skipReason } = loadVectors<SignatureVector>("replay-window");

describe("replay-window vectors", { skip: skipReason ?? false }, () => {
  for (const { file, vector } of vectors) {
    test(file, async () => {
      const now = () => vector.verifier_now_unix_seconds! * 1000;
      const store = new MemoryNonceStore({ now });
      const verifier = createRequestVerifier({ nonceStore: store, now });
      if (vector.extra_setup?.kind === "prime_nonce_under_other_keyid") {
        assert.equal(await store.seen(vector.extra_setup.other_keyid, vector.signature_params.nonce, 300), true);
      }
      const request = {
        method: vector.request.method,
        url: vector.request.target_uri,
        headers: vectorHeaders(vector),
        body: vector.request.body,
      };
      const outcome = vector.expected_outcome!;
      if (outcome.type === "accept") {
        const result = await verifier.verify(request);
        assert.equal(result.keyid, vector.signature_params.keyid);
        // The same request through the same verifier is a replay.
        await assert.rejects(
          verifier.verify(request),
          (e: unknown) => e instanceof ProtoError && e.code === "replayed_nonce" && e.status === 401,
        );
      } else {
        await assert.rejects(
          verifier.verify(request),
          (e: unknown) => e instanceof ProtoError && e.code === outcome.code && e.status === outcome.status,
        );
      }
    });
  }
});
