/**
 * What the browser suites check on any page: text contrast as WCAG 2 computes it, and
 * expressions evaluated in the page. Shared by the directory's and the attestor's page suites.
 */
import type { Page } from "playwright-core";

/**
 * Text/background contrast of every element matching each selector, as WCAG 2 computes it. A
 * string, because the test's compiler wraps named functions in a helper the page does not have.
 */
const CONTRAST_SCRIPT = `(selectors) => {
  const parse = (value) => {
    const parts = (value.match(/[\\d.]+/g) || []).map(Number);
    return { r: parts[0] || 0, g: parts[1] || 0, b: parts[2] || 0, a: parts.length > 3 ? parts[3] : 1 };
  };
  const channel = (v) => { const c = v / 255; return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  const luminance = (c) => 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b);
  const background = (element) => {
    for (let e = element; e !== null; e = e.parentElement) {
      const color = parse(getComputedStyle(e).backgroundColor);
      if (color.a > 0) return color;
    }
    return { r: 255, g: 255, b: 255, a: 1 };
  };
  const results = [];
  for (const selector of selectors) {
    for (const element of [...document.querySelectorAll(selector)].slice(0, 25)) {
      const fg = luminance(parse(getComputedStyle(element).color));
      const bg = luminance(background(element));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      results.push({ selector, text: (element.textContent || "").trim().slice(0, 40), ratio });
    }
  }
  return results;
}`;

export function contrastOf(page: Page, selectors: string[]) {
  return inPage<{ selector: string; text: string; ratio: number }[]>(
    page,
    `(${CONTRAST_SCRIPT})(${JSON.stringify(selectors)})`,
  );
}

/**
 * An expression evaluated in the page. Given as text: the tests are compiled without the DOM's
 * types, and the compiler would wrap named functions in a helper the page does not have.
 */
export const inPage = <T = unknown>(page: Page, expression: string) => page.evaluate(expression) as Promise<T>;
