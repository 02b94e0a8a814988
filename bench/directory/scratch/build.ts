import { createStore, loadStore } from "../lib/dataset.js";
const n = Number(process.argv[2] ?? 1000000);
const engine = (process.argv[3] ?? "sqlite") as "sqlite" | "postgres";
const s = await createStore(engine, "postgres://postgres@127.0.0.1:5432/test");
const r = await loadStore(s, { count: n });
console.log(s.url, JSON.stringify(r));
