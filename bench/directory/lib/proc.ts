/**
 * What a server process costs, read from Linux's /proc: CPU time (user + system) to divide by the
 * requests answered in a window, and resident memory split into anonymous pages (heaps, buffers:
 * what the process holds) and file pages (mostly SQLite's memory-mapped database, which the page
 * cache may reclaim). Undefined off Linux.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";

let ticksPerSecond: number | undefined;

/** USER_HZ: the unit of /proc/<pid>/stat's times (100 on every Linux seen, asked once anyway). */
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** CPU seconds (user + system) the process has used so far. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined || !existsSync(`/proc/${pid}/stat`)) return undefined;
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name (field 2) is in parentheses and may hold spaces: count fields after it.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
  return (Number(fields[11]) + Number(fields[12])) / clockTicks();
}

export interface Memory {
  /** Anonymous resident memory, KiB. */
  rssAnonKiB: number;
  /** File-backed resident memory (mapped files, the binary), KiB. */
  rssFileKiB: number;
}

export function memory(pid: number | undefined): Memory | undefined {
  if (pid === undefined || !existsSync(`/proc/${pid}/status`)) return undefined;
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]);
  return { rssAnonKiB: kib("RssAnon"), rssFileKiB: kib("RssFile") };
}

/** The 1, 5 and 15 minute load averages, as /proc/loadavg prints them. */
export function loadAverage(): string {
  return existsSync("/proc/loadavg") ? readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ") : "n/a";
}
