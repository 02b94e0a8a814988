/**
 * The report's chart, as hand-written SVG: one bar per figure against its target. Ratios to a
 * baseline are drawn on their own scale with the target as a tick; limits (latency, memory, CPU,
 * statements) as a share of the limit, with the limit at 100%.
 */
import { type Figure, isRatio, met } from "./figures.js";

const WIDTH = 1000;
const LABEL_RIGHT = 410;
const BAR_LEFT = 422;
const BAR_WIDTH = 380;
const VALUE_LEFT = BAR_LEFT + BAR_WIDTH + 10;
const ROW = 28;
const BAR_HEIGHT = 16;
const RATIO_SCALE = 1.2;
const LIMIT_SCALE = 2;
const COLOURS = { met: "#2e7d32", missed: "#c62828", none: "#9e9e9e", grid: "#dddddd", text: "#212121" };

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function text(x: number, y: number, content: string, attributes = ""): string {
  return `<text x="${x}" y="${y}" ${attributes}>${escapeXml(content)}</text>`;
}

function number(value: number): string {
  if (Number.isInteger(value) && value >= 1) return String(value);
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

const UNIT_TEXT: Record<Figure["unit"], string> = { ratio: "", ms: " ms", MB: " MB", x: "x", "per mint": "" };
const COMPARISON_TEXT: Record<Figure["comparison"], string> = { ">=": "≥", "<=": "≤", "<": "<" };

/** "0.92 (target ≥ 0.90)" */
export function figureText(figure: Figure): string {
  const unit = UNIT_TEXT[figure.unit];
  const target = `${COMPARISON_TEXT[figure.comparison]} ${number(figure.limit)}${unit}`;
  return figure.value === undefined ? `no result (${target})` : `${number(figure.value)}${unit} (${target})`;
}

interface Panel {
  title: string;
  figures: Figure[];
  scale: number;
  ticks: number[];
  tickText: (tick: number) => string;
  /** Where a figure's bar ends, on the panel's scale. */
  position: (figure: Figure) => number;
  /** Where its target mark goes. */
  mark: (figure: Figure) => number;
}

function panel(spec: Panel, top: number): { svg: string; height: number } {
  const parts: string[] = [];
  const x = (v: number) => BAR_LEFT + (Math.min(v, spec.scale) / spec.scale) * BAR_WIDTH;
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
  spec.figures.forEach((figure, i) => {
    const y = rowsTop + i * ROW;
    const middle = y + ROW / 2;
    parts.push(text(LABEL_RIGHT, middle + 4, figure.label, 'font-size="12.5" text-anchor="end"'));
    const outcome = met(figure);
    if (figure.value === undefined || outcome === undefined) {
      parts.push(
        text(BAR_LEFT + 6, middle + 4, "no result", `font-size="12" fill="${COLOURS.none}" font-style="italic"`),
      );
    } else {
      const end = x(spec.position(figure));
      const colour = outcome ? COLOURS.met : COLOURS.missed;
      parts.push(
        `<rect x="${BAR_LEFT}" y="${middle - BAR_HEIGHT / 2}" width="${Math.max(1, end - BAR_LEFT).toFixed(1)}" height="${BAR_HEIGHT}" fill="${colour}" rx="2"/>`,
      );
      if (spec.position(figure) > spec.scale) {
        // Off the scale: an arrowhead says the bar goes on.
        parts.push(
          `<path d="M ${end + 1} ${middle - BAR_HEIGHT / 2} l 8 ${BAR_HEIGHT / 2} l -8 ${BAR_HEIGHT / 2} z" fill="${colour}"/>`,
        );
      }
    }
    const markX = x(spec.mark(figure));
    parts.push(
      `<line x1="${markX}" y1="${middle - BAR_HEIGHT / 2 - 4}" x2="${markX}" y2="${middle + BAR_HEIGHT / 2 + 4}" stroke="${COLOURS.text}" stroke-width="2.5"/>`,
    );
    const fill = outcome === undefined ? COLOURS.none : outcome ? COLOURS.met : COLOURS.missed;
    parts.push(text(VALUE_LEFT + 8, middle + 4, figureText(figure), `font-size="12.5" fill="${fill}"`));
  });
  return { svg: parts.join("\n"), height: rowsBottom + 24 - top };
}

export interface ChartHeading {
  title: string;
  subtitle: string;
}

export function chart(figures: readonly Figure[], heading: ChartHeading): string {
  const ratios = figures.filter(isRatio);
  const limits = figures.filter((f) => !isRatio(f));
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
      position: (f) => f.value ?? 0,
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
      position: (f) => (f.value ?? 0) / f.limit,
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
