// Small DOM helpers: labelled controls, captions, number grids and a tooltip.

type Attrs = Record<string, string | number | boolean | undefined>;
type Child = Node | string | null | undefined | false;

let uid = 0;
/** A fresh id for tying a <label> to its control. */
export function freshId(prefix: string): string {
  uid += 1;
  return `${prefix}-${uid}`;
}

export function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (key === "class") node.className = String(value);
    else if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, ...children);
  return node;
}

export function append(node: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

export function clear(node: Node): void {
  while (node.firstChild) node.removeChild(node.firstChild);
}

/** A playground: heading, plain-words caption, controls and output. */
export function section(id: string, title: string, caption: Child[]): { root: HTMLElement; controls: HTMLElement; body: HTMLElement } {
  const controls = el("div", { class: "controls" });
  const body = el("div", { class: "body" });
  const root = el(
    "section",
    { class: "playground", id, "aria-labelledby": `${id}-title` },
    el("h2", { id: `${id}-title` }, title),
    el("p", { class: "caption" }, ...caption),
    controls,
    body,
  );
  return { root, controls, body };
}

export interface Slider {
  root: HTMLElement;
  input: HTMLInputElement;
  value(): number;
  set(v: number): void;
}

/**
 * A labelled range slider showing its value. Native <input type=range> moves
 * with the arrow keys, Page Up/Down, Home and End.
 */
export function slider(label: string, min: number, max: number, step: number, value: number, onInput: (v: number) => void, format: (v: number) => string = String, name?: string): Slider {
  const id = freshId("slider");
  const input = el("input", { type: "range", id, min, max, step, value, name });
  const output = el("output", { for: id, class: "value" }, format(value));
  const sync = () => {
    output.textContent = format(Number(input.value));
    input.setAttribute("aria-valuetext", format(Number(input.value)));
  };
  sync();
  input.addEventListener("input", () => {
    sync();
    onInput(Number(input.value));
  });
  const root = el("div", { class: "control slider" }, el("label", { for: id }, label), input, output);
  return {
    root,
    input,
    value: () => Number(input.value),
    set: (v: number) => {
      input.value = String(v);
      sync();
    },
  };
}

export function select(label: string, options: Array<[string, string]>, value: string, onChange: (v: string) => void, name?: string): { root: HTMLElement; input: HTMLSelectElement } {
  const id = freshId("select");
  const input = el("select", { id, name }, ...options.map(([v, text]) => el("option", { value: v, selected: v === value }, text)));
  input.addEventListener("change", () => onChange(input.value));
  return { root: el("div", { class: "control" }, el("label", { for: id }, label), input), input };
}

/** A group of radio buttons with a visible legend. */
export function radios(legend: string, name: string, options: Array<[string, string]>, value: string, onChange: (v: string) => void): { root: HTMLElement; inputs: HTMLInputElement[] } {
  const inputs: HTMLInputElement[] = [];
  const labels = options.map(([v, text]) => {
    const id = freshId(name);
    const input = el("input", { type: "radio", name, id, value: v, checked: v === value });
    input.addEventListener("change", () => input.checked && onChange(v));
    inputs.push(input);
    return el("label", { for: id, class: "radio" }, input, " ", text);
  });
  return { root: el("fieldset", { class: "control radios" }, el("legend", {}, legend), el("div", { class: "options" }, ...labels)), inputs };
}

export function fmt(v: number, digits = 2): string {
  const s = v.toFixed(digits);
  return /^-0\.?0*$/.test(s) ? s.slice(1) : s;
}

/**
 * A table of numbers with coloured cells; `highlightRow` marks one row.
 * Row and column headers are real <th> cells for screen readers.
 */
export function numberGrid(rows: ArrayLike<number>[], opts: { rowLabels: string[]; colLabels?: string[]; color: (v: number) => string; digits?: number; highlightRow?: number; caption?: string; className?: string }): HTMLElement {
  const table = el("table", { class: `grid ${opts.className ?? ""}` });
  if (opts.caption) table.appendChild(el("caption", {}, opts.caption));
  if (opts.colLabels) {
    table.appendChild(el("thead", {}, el("tr", {}, el("th", { scope: "col" }, ""), ...opts.colLabels.map((c) => el("th", { scope: "col" }, c)))));
  }
  const tbody = el("tbody");
  rows.forEach((r, i) => {
    const tr = el("tr", { class: i === opts.highlightRow ? "hl" : undefined }, el("th", { scope: "row" }, opts.rowLabels[i]));
    for (let c = 0; c < r.length; c++) {
      const td = el("td", {}, fmt(r[c], opts.digits ?? 2));
      const background = opts.color(r[c]);
      td.style.background = background;
      td.style.color = inkOn(background);
      tr.appendChild(td);
    }
    tbody.appendChild(tr);
  });
  table.appendChild(tbody);
  return el("div", { class: "grid-wrap" }, table);
}

/** Black or white text, whichever reads better on a background given as rgb(r,g,b) or #rrggbb. */
export function inkOn(background: string): string {
  let rgb: number[] | null = null;
  const m = /^rgb\((\d+),\s*(\d+),\s*(\d+)\)$/.exec(background);
  if (m) rgb = [Number(m[1]), Number(m[2]), Number(m[3])];
  else if (/^#[0-9a-f]{6}$/i.test(background)) rgb = [1, 3, 5].map((i) => parseInt(background.slice(i, i + 2), 16));
  if (!rgb) return "inherit";
  const [r, g, b] = rgb.map((v) => {
    const c = v / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.2 ? "#fff" : "#111";
}

let tooltip: HTMLElement | null = null;

/** One shared floating label for hovering over canvases. */
export function showTooltip(text: string, clientX: number, clientY: number): void {
  if (!tooltip) {
    tooltip = el("div", { class: "tooltip", role: "status" });
    document.body.appendChild(tooltip);
  }
  tooltip.textContent = text;
  tooltip.hidden = false;
  const pad = 14;
  const w = tooltip.offsetWidth;
  const x = clientX + pad + w > window.innerWidth ? clientX - pad - w : clientX + pad;
  tooltip.style.left = `${Math.max(4, x)}px`;
  tooltip.style.top = `${clientY + pad}px`;
}

export function hideTooltip(): void {
  if (tooltip) tooltip.hidden = true;
}
