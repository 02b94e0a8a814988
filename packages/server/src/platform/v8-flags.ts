import { setFlagsFromString } from "node:v8";

let tuned = false;

/**
 * Turns off V8's allocation-site pretenuring for the serving process. A server's per-request
 * objects die young, but under steady load V8 sometimes decides an allocation site's objects
 * survive (a young collection caught many of them in flight) and from then on allocates them
 * straight in the old generation: every request's garbage then costs a full mark-compact share,
 * and the same build served reads at half the rate in some runs and not others (the directory's
 * read bench: 0.61-0.76 of a bare node:http server with it, 1.01-1.07 without). Set once, before
 * the first request; process-wide, like every V8 flag.
 */
export function tuneV8ForServing(): void {
  if (tuned) return;
  tuned = true;
  setFlagsFromString("--no-allocation-site-pretenuring");
}
