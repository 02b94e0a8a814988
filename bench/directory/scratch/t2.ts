import { generateRows } from "../lib/dataset.js";
const t = performance.now(); let n = 0, len = 0, titles=0;
for (const r of generateRows({ count: 100000 })) { n++; len += r.body.length; titles += (r.description?.length ?? 0); }
console.log(n, len / n, titles/n, (performance.now() - t) / 1000);
