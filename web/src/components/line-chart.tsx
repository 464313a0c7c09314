/**
 * A time-series line chart (uPlot, drawn on canvas). The figures it draws are also given as a
 * table for screen readers and keyboard users (`summary`), since a canvas says nothing.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import type uPlot from 'uplot';

/**
 * uPlot is loaded on first use, in its own file: the pages (and the overview's figures) do not
 * wait for the chart library to download and parse.
 */
let uPlotModule: Promise<typeof uPlot> | null = null;
function loadUPlot(): Promise<typeof uPlot> {
  uPlotModule ??= Promise.all([import('uplot'), import('uplot/dist/uPlot.min.css')]).then(([m]) => m.default);
  return uPlotModule;
}

export interface Series {
  label: string;
  color: string;
  values: (number | null)[];
}

/** The last `windowSeconds` up to the latest sample (or now). */
function xRange(times: number[], windowSeconds: number): { min: number; max: number } {
  const max = times.length > 0 ? (times[times.length - 1] as number) : Date.now() / 1000;
  return { min: max - windowSeconds, max };
}

/** `windowSeconds`: the x axis always spans this much time up to the latest sample, so that a few samples do not stretch over the chart. */
export function LineChart({
  title,
  times,
  series,
  height = 220,
  windowSeconds = 900,
}: { title: string; times: number[]; series: Series[]; height?: number; windowSeconds?: number }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = series.map((s) => s.label).join('|');
  const [UPlot, setUPlot] = useState<typeof uPlot | null>(null);

  useEffect(() => {
    loadUPlot().then((m) => setUPlot(() => m));
  }, []);

  useEffect(() => {
    if (!el.current || !UPlot) return;
    const width = Math.max(280, el.current.clientWidth || 600);
    const opts: uPlot.Options = {
      width,
      height,
      // The x range is set explicitly below (setScale): uPlot widens a single sample's range to years.
      scales: {
        x: { time: true, auto: false },
        y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
      },
      axes: [{}, { label: 'jobs / min' }],
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2 }))],
    };
    plot.current = new UPlot(opts, [times, ...series.map((s) => s.values)] as uPlot.AlignedData, el.current);
    plot.current.setScale('x', xRange(times, windowSeconds));
    const resize = new ResizeObserver(() => {
      if (el.current && plot.current) plot.current.setSize({ width: Math.max(280, el.current.clientWidth), height });
    });
    resize.observe(el.current);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [UPlot, shape, height, windowSeconds]);

  useEffect(() => {
    if (!plot.current) return;
    plot.current.setData([times, ...series.map((s) => s.values)] as uPlot.AlignedData, false);
    plot.current.setScale('x', xRange(times, windowSeconds));
  });

  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div ref={el} class="chart-canvas" aria-hidden="true" />
    </figure>
  );
}
