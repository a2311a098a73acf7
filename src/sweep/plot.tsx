/**
 * The sweep view's small plot: an SVG drawn with d3-scale's scales and ticks (linear, log for
 * swept values spanning decades such as learning rates, or points for categories). Its colours
 * are JupyterLab's theme variables, set in style/base.css on classes, so a theme change needs no
 * redraw. Its text alternative is the same numbers (`describePlot`), in the SVG's <desc>.
 */
import { scaleLinear, scaleLog, scalePoint } from 'd3-scale';
import * as React from 'react';

import { IPlotData, allPoints, describePlot, formatMetric } from './rows';

const WIDTH = 320;
const HEIGHT = 180;
const MARGIN = { top: 8, right: 10, bottom: 30, left: 48 };
/** Series colours cycle through this many theme colours (and dash patterns after them). */
export const PALETTE_SIZE = 6;

type XScale = (value: number | string) => number;

/** At most this many distinct swept values are ticked each by its own label. */
const MAX_VALUE_TICKS = 8;

function xScale(data: IPlotData): { scale: XScale; ticks: [string, number][] } {
  const points = allPoints(data.series);
  const range: [number, number] = [MARGIN.left, WIDTH - MARGIN.right];
  if (!data.numericX) {
    const names = [...new Set(points.map(p => String(p.x)))];
    const scale = scalePoint<string>().domain(names).range(range).padding(0.4);
    return {
      scale: x => scale(String(x)) ?? range[0],
      ticks: names.map(name => [name, scale(name) ?? range[0]])
    };
  }
  const numbers = points.map(p => Number(p.x));
  let low = Math.min(...numbers);
  let high = Math.max(...numbers);
  if (low === high) {
    low -= 1;
    high += 1;
  }
  const scale = data.logX
    ? scaleLog().domain([low, high]).range(range)
    : scaleLinear().domain([low, high]).range(range).nice();
  // A swept parameter's few values are its ticks, read as the grid wrote them ("3e-4").
  const labels = new Map(points.map(p => [Number(p.x), p.xLabel]));
  if (data.axis.kind === 'param' && labels.size <= MAX_VALUE_TICKS) {
    return {
      scale: x => scale(Number(x)),
      ticks: [...labels].map(([value, label]) => [label, scale(value)])
    };
  }
  const format = data.logX ? scale.tickFormat(5, '~g') : scale.tickFormat(5);
  return {
    scale: x => scale(Number(x)),
    ticks: scale
      .ticks(5)
      .filter(tick => format(tick) !== '')
      .map(tick => [format(tick), scale(tick)])
  };
}

function yScale(data: IPlotData) {
  const ys = allPoints(data.series).map(p => p.y);
  let low = Math.min(...ys);
  let high = Math.max(...ys);
  if (low === high) {
    low -= Math.abs(low) * 0.1 || 1;
    high += Math.abs(high) * 0.1 || 1;
  }
  return scaleLinear()
    .domain([low, high])
    .range([HEIGHT - MARGIN.bottom, MARGIN.top])
    .nice();
}

export function SweepPlot(props: {
  data: IPlotData;
  /** Ids for the SVG's title and description (unique in the page). */
  idPrefix: string;
  onPick: (index: number) => void;
}): JSX.Element {
  const { data, idPrefix, onPick } = props;
  const xName = data.axis.kind === 'step' ? 'step' : data.axis.name;
  const title = `${data.metric} against ${xName}`;
  const description = describePlot(data);
  const points = allPoints(data.series);
  if (!points.length) {
    return (
      <figure className="j2c-SweepPlot" data-j2c="sweep-plot">
        <figcaption>{description}</figcaption>
      </figure>
    );
  }
  const x = xScale(data);
  const y = yScale(data);
  const yFormat = y.tickFormat(4);
  const lines = data.axis.kind === 'step' || data.series.length > 1;
  return (
    <figure className="j2c-SweepPlot" data-j2c="sweep-plot">
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        role="img"
        aria-labelledby={`${idPrefix}-title ${idPrefix}-desc`}
        data-points={points.length}
      >
        <title id={`${idPrefix}-title`}>{title}</title>
        <desc id={`${idPrefix}-desc`}>{description}</desc>
        <g className="j2c-SweepPlot-axis" aria-hidden="true">
          <line
            x1={MARGIN.left}
            x2={WIDTH - MARGIN.right}
            y1={HEIGHT - MARGIN.bottom}
            y2={HEIGHT - MARGIN.bottom}
          />
          <line
            x1={MARGIN.left}
            x2={MARGIN.left}
            y1={MARGIN.top}
            y2={HEIGHT - MARGIN.bottom}
          />
          {x.ticks.map(([label, at]) => (
            <text
              key={`x-${label}`}
              x={at}
              y={HEIGHT - MARGIN.bottom + 12}
              textAnchor="middle"
            >
              {label}
            </text>
          ))}
          {y.ticks(4).map(tick => (
            <g key={`y-${tick}`}>
              <line
                className="j2c-SweepPlot-grid"
                x1={MARGIN.left}
                x2={WIDTH - MARGIN.right}
                y1={y(tick)}
                y2={y(tick)}
              />
              <text x={MARGIN.left - 4} y={y(tick) + 3} textAnchor="end">
                {yFormat(tick)}
              </text>
            </g>
          ))}
          <text
            x={(WIDTH + MARGIN.left) / 2}
            y={HEIGHT - 2}
            textAnchor="middle"
          >
            {xName}
          </text>
        </g>
        {data.series.map((series, n) => (
          <g
            key={series.label}
            className={`j2c-SweepPlot-series j2c-SweepPlot-color${n % PALETTE_SIZE}`}
            data-dashed={n >= PALETTE_SIZE ? 'true' : undefined}
          >
            {lines && series.points.length > 1 ? (
              <path
                d={series.points
                  .map(
                    (p, i) =>
                      `${i ? 'L' : 'M'}${x.scale(p.x).toFixed(1)},${y(p.y).toFixed(1)}`
                  )
                  .join('')}
              />
            ) : null}
            {data.axis.kind === 'step' && series.points.length > 1
              ? null
              : series.points.map(point => (
                  <circle
                    key={`${point.index}-${String(point.x)}`}
                    className="j2c-SweepPlot-point"
                    data-index={point.index}
                    cx={x.scale(point.x)}
                    cy={y(point.y)}
                    r={3.5}
                    onClick={() => onPick(point.index)}
                  >
                    <title>
                      {`#${point.index} ${xName} ${point.xLabel}: ${formatMetric(point.y)}`}
                    </title>
                  </circle>
                ))}
          </g>
        ))}
      </svg>
      {data.series.length > 1 ? (
        <ul className="j2c-SweepPlot-legend" aria-hidden="true">
          {data.series.map((series, n) => (
            <li
              key={series.label}
              className={`j2c-SweepPlot-color${n % PALETTE_SIZE}`}
            >
              <span className="j2c-SweepPlot-swatch" />
              {series.label}
            </li>
          ))}
        </ul>
      ) : null}
    </figure>
  );
}
