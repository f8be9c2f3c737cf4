// A small hand-drawn SVG bar chart of per-minute counts (no library, no build
// step): one bar per minute, oldest left, a baseline, and a text alternative
// (role="img" + aria-label) that says what the bars show, for screen readers.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 150;
const HEIGHT = 40;

function svg(tag, attributes) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  return element;
}

/** counts: numbers, oldest first; label: what they count ("Finished per minute"). */
export function barChart(counts, label, kind) {
  const total = counts.reduce((sum, n) => sum + n, 0);
  const peak = Math.max(0, ...counts);
  const last = counts.length ? counts[counts.length - 1] : 0;
  const text = `${label}, last ${counts.length} min: ${total} in all, at most ${peak} a ` +
    `minute, ${last} this minute`;
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT,
    role: "img", "aria-label": text, class: `chart chart-${kind}`, "data-total": total });
  const slot = WIDTH / Math.max(1, counts.length);
  counts.forEach((count, index) => {
    if (count === 0) return;
    const height = Math.max(1, Math.round((count / peak) * (HEIGHT - 2)));
    chart.append(svg("rect", { x: (index * slot).toFixed(2), y: HEIGHT - 1 - height,
      width: Math.max(1, slot - 1).toFixed(2), height, class: "bar" }));
  });
  chart.append(svg("line", { x1: 0, y1: HEIGHT - 0.5, x2: WIDTH, y2: HEIGHT - 0.5,
    class: "baseline" }));
  return chart;
}
