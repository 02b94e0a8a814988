/**
 * The report's chart, as hand-written SVG: one row per figure, one bar per run of its bench
 * against the target. Ratios to a baseline are drawn on their own scale with the target as a tick;
 * limits (latency, memory, CPU, statements) as a share of the limit, with the limit at 100%. Where
 * a run measured in alternating rounds, each round is a dot on its bar, so a bimodal run shows.
 */
import { decisive, type Figure, type FigureRuns, isRatio, judgedByRound, met, outcome } from "./figures.js";

const WIDTH = 1100;
const LABEL_RIGHT = 410;
const BAR_LEFT = 422;
const BAR_WIDTH = 380;
const VALUE_LEFT = BAR_LEFT + BAR_WIDTH + 10;
const ROW = 30;
const BAR_HEIGHT = 18;
const RATIO_SCALE = 1.2;
const LIMIT_SCALE = 2;
const COLOURS = { met: "#2e7d32", missed: "#c62828", none: "#9e9e9e", grid: "#dddddd", text: "#212121" };

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function text(x: number, y: number, content: string, attributes = ""): string {
  return `<text x="${x}" y="${y}" ${attributes}>${escapeXml(content)}</text>`;
}

export function number(value: number): string {
  if (Number.isInteger(value) && value >= 1) return String(value);
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

/** A measured value of `figure`: ratios with three digits, so that 0.949 against a target of 0.95 reads as missed. */
export function shown(figure: Figure, value: number): string {
  return figure.unit === "ratio" || figure.unit === "x" ? value.toFixed(3) : number(value);
}

const UNIT_TEXT: Record<Figure["unit"], string> = {
  ratio: "",
  ms: " ms",
  MB: " MB",
  x: "x",
  "per mint": "",
  µs: " µs",
};
const COMPARISON_TEXT: Record<Figure["comparison"], string> = { ">=": "≥", "<=": "≤", "<": "<" };

/** "≥ 0.80", "≥ 0.80 in every round" */
export function targetText(figure: Figure): string {
  return `${COMPARISON_TEXT[figure.comparison]} ${number(figure.limit)}${UNIT_TEXT[figure.unit]}${figure.everyRound ? " in every round" : ""}`;
}

/** One run's value: "0.64", or "0.81, worst round 0.74" when every round must meet the target. */
export function valueText(figure: Figure): string {
  if (figure.value === undefined) return "no result";
  const unit = UNIT_TEXT[figure.unit];
  const worst = decisive(figure);
  return judgedByRound(figure) && worst !== undefined
    ? `${shown(figure, figure.value)}${unit}, worst round ${shown(figure, worst)}${unit}`
    : `${shown(figure, figure.value)}${unit}`;
}

/** "0.92 (target ≥ 0.90)" for one run. */
export function figureText(figure: Figure): string {
  const target = targetText(figure);
  return figure.value === undefined ? `no result (${target})` : `${valueText(figure)} (${target})`;
}

/** The decisive value of each run, "0.640 / 0.610 (≥ 0.50)", for the chart's narrow column and the summary. */
export function runsText(figure: FigureRuns): string {
  const unit = UNIT_TEXT[figure.figure.unit];
  const values = figure.runs.map((run) => {
    const value = decisive(run);
    return value === undefined ? "–" : `${shown(run, value)}${unit}`;
  });
  const target = `${COMPARISON_TEXT[figure.figure.comparison]} ${number(figure.figure.limit)}${unit}`;
  const worst = figure.runs.some(judgedByRound) ? "worst round " : "";
  return `${worst}${values.join(" / ")} (${target})`;
}

interface Panel {
  title: string;
  figures: FigureRuns[];
  scale: number;
  ticks: number[];
  tickText: (tick: number) => string;
  /** Where a value of a figure goes, on the panel's scale. */
  position: (figure: Figure, value: number) => number;
  /** Where its target mark goes. */
  mark: (figure: Figure) => number;
}

function colourOf(outcome: boolean | undefined): string {
  return outcome === undefined ? COLOURS.none : outcome ? COLOURS.met : COLOURS.missed;
}

function panel(spec: Panel, top: number): { svg: string; height: number } {
  const parts: string[] = [];
  const x = (v: number) => BAR_LEFT + (Math.min(Math.max(v, 0), spec.scale) / spec.scale) * BAR_WIDTH;
  parts.push(text(24, top + 16, spec.title, 'font-size="15" font-weight="bold"'));
  const rowsTop = top + 30;
  const rowsBottom = rowsTop + spec.figures.length * ROW;
  for (const tick of spec.ticks) {
    const tx = x(tick);
    parts.push(
      `<line x1="${tx}" y1="${rowsTop - 4}" x2="${tx}" y2="${rowsBottom}" stroke="${COLOURS.grid}" stroke-width="1"/>`,
    );
    parts.push(text(tx, rowsBottom + 15, spec.tickText(tick), 'font-size="11" text-anchor="middle" fill="#616161"'));
  }
  spec.figures.forEach((measured, i) => {
    const { figure, runs } = measured;
    const y = rowsTop + i * ROW;
    const middle = y + ROW / 2;
    parts.push(text(LABEL_RIGHT, middle + 4, figure.label, 'font-size="12.5" text-anchor="end"'));
    const gap = runs.length > 1 ? 2 : 0;
    const height = (BAR_HEIGHT - gap * (runs.length - 1)) / Math.max(1, runs.length);
    const barsTop = middle - BAR_HEIGHT / 2;
    if (runs.every((run) => met(run) === undefined)) {
      parts.push(
        text(BAR_LEFT + 6, middle + 4, "no result", `font-size="12" fill="${COLOURS.none}" font-style="italic"`),
      );
    }
    runs.forEach((run, r) => {
      const value = decisive(run);
      if (value === undefined || met(run) === undefined) return;
      const barTop = barsTop + r * (height + gap);
      const at = spec.position(run, value);
      const end = x(at);
      const colour = colourOf(met(run));
      parts.push(
        `<rect x="${BAR_LEFT}" y="${barTop.toFixed(1)}" width="${Math.max(1, end - BAR_LEFT).toFixed(1)}" height="${height.toFixed(1)}" fill="${colour}" rx="1.5"><title>${escapeXml(`run ${r + 1}: ${figureText(run)}`)}</title></rect>`,
      );
      if (at > spec.scale) {
        // Off the scale: an arrowhead says the bar goes on.
        parts.push(
          `<path d="M ${end + 1} ${barTop.toFixed(1)} l 6 ${(height / 2).toFixed(1)} l -6 ${(height / 2).toFixed(1)} z" fill="${colour}"/>`,
        );
      }
      for (const round of run.rounds ?? []) {
        parts.push(
          `<circle cx="${x(spec.position(run, round)).toFixed(1)}" cy="${(barTop + height / 2).toFixed(1)}" r="${Math.min(3, height / 2 - 0.5).toFixed(1)}" fill="#ffffff" stroke="${COLOURS.text}" stroke-width="0.8"/>`,
        );
      }
    });
    const markX = x(spec.mark(figure));
    parts.push(
      `<line x1="${markX}" y1="${barsTop - 4}" x2="${markX}" y2="${barsTop + BAR_HEIGHT + 4}" stroke="${COLOURS.text}" stroke-width="2.5"/>`,
    );
    const verdict = outcome(measured);
    const fill = verdict === "met" ? COLOURS.met : verdict === "not met" ? COLOURS.missed : COLOURS.none;
    parts.push(text(VALUE_LEFT + 8, middle + 4, runsText(measured), `font-size="12.5" fill="${fill}"`));
  });
  return { svg: parts.join("\n"), height: rowsBottom + 24 - top };
}

export interface ChartHeading {
  title: string;
  subtitle: string;
}

export function chart(figures: readonly FigureRuns[], heading: ChartHeading): string {
  const ratios = figures.filter((f) => isRatio(f.figure));
  const limits = figures.filter((f) => !isRatio(f.figure));
  const runs = Math.max(1, ...figures.map((f) => f.runs.length));
  const parts: string[] = [];
  let y = 20;
  parts.push(text(24, y + 14, heading.title, 'font-size="18" font-weight="bold"'));
  parts.push(text(24, y + 34, heading.subtitle, 'font-size="12.5" fill="#424242"'));
  y += 52;
  const ratioPanel = panel(
    {
      title: "Ratios to a baseline measured in the same run (higher is better; the black tick is the target)",
      figures: ratios,
      scale: RATIO_SCALE,
      ticks: [0, 0.2, 0.4, 0.6, 0.8, 1, 1.2],
      tickText: (t) => t.toFixed(1),
      position: (_f, value) => value,
      mark: (f) => f.limit,
    },
    y,
  );
  parts.push(ratioPanel.svg);
  y += ratioPanel.height + 12;
  const limitPanel = panel(
    {
      title: "Limits (lower is better): each figure as a share of its limit, the black tick at 100%",
      figures: limits,
      scale: LIMIT_SCALE,
      ticks: [0, 0.5, 1, 1.5, 2],
      tickText: (t) => `${Math.round(t * 100)}%`,
      position: (f, value) => value / f.limit,
      mark: () => 1,
    },
    y,
  );
  parts.push(limitPanel.svg);
  y += limitPanel.height + 8;
  const legend = [
    [COLOURS.met, "target met"],
    [COLOURS.missed, "target not met"],
    [COLOURS.none, "no result"],
  ] as const;
  legend.forEach(([colour, label], i) => {
    const lx = 24 + i * 150;
    parts.push(`<rect x="${lx}" y="${y}" width="14" height="14" fill="${colour}" rx="2"/>`);
    parts.push(text(lx + 20, y + 11.5, label, 'font-size="12.5"'));
  });
  parts.push(
    text(
      24,
      y + 32,
      runs > 1
        ? `One bar per run (${runs} runs, top to bottom); a figure counts as met only when every run meets it. Dots: the rounds of a run.`
        : "Dots: the rounds of the run.",
      'font-size="12.5" fill="#424242"',
    ),
  );
  y += 22;
  y += 30;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" role="img" width="${WIDTH}" height="${y}" viewBox="0 0 ${WIDTH} ${y}" font-family="'DejaVu Sans', 'Segoe UI', Helvetica, Arial, sans-serif" fill="${COLOURS.text}">`,
    `<title>${escapeXml(`${heading.title}: ${heading.subtitle}`)}</title>`,
    `<rect width="${WIDTH}" height="${y}" fill="#ffffff"/>`,
    ...parts,
    "</svg>",
    "",
  ].join("\n");
}
