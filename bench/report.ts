/** Benchmark results go to standard output, one report line at a time. */
export function printLine(line: string): void {
  process.stdout.write(`${line}\n`);
}
