/**
 * Child process: the directory exactly as `proto-server directory` builds it (configuration from
 * the environment), listening on 127.0.0.1 at an ephemeral port. Prints `READY <port>` once it
 * accepts connections and drains on SIGTERM. BENCH_REDIS_PREFIX, when set, is the prefix of its
 * Redis keys (with REDIS_URL), so a run's keys can be removed after it.
 */
import { buildDirectoryApp } from "../../../packages/server/src/directory/app.js";
import { readDirectoryConfig } from "../../../packages/server/src/directory/config.js";
import { collectGarbagePeriodically } from "../../soak-gc.js";

const redisPrefix = process.env.BENCH_REDIS_PREFIX;
const directory = await buildDirectoryApp(readDirectoryConfig(), redisPrefix ? { redisPrefix } : {});
collectGarbagePeriodically();
await directory.app.listen({ port: 0, host: "127.0.0.1" });
const address = directory.app.server.address();
if (address === null || typeof address === "string") throw new Error("no TCP address");
process.stdout.write(`READY ${address.port}\n`);
const stop = () => {
  directory.close().finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
