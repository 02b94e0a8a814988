import { serve } from "@hono/node-server";
import { protoClientErrors } from "@proto/kit/hono";
import { app } from "./app.js";

// What serve() returns, as it returns it: protoClientErrors takes @hono/node-server's ServerType.
protoClientErrors(serve({ fetch: app.fetch, port: 3000 }));
