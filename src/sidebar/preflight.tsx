/** What the preflight says would be sent: layer sizes, largest paths, exclusions, warnings. */
import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { formatBytes } from '../format';
import { ExcludedGroup, ImageReport, PackPlan } from '../models';
import { IPreflightState } from './model';

const LARGEST_SHOWN = 5;

function Layers(props: {
  plan: PackPlan;
  trans: TranslationBundle;
}): JSX.Element {
  const { plan, trans } = props;
  return (
    <table className="j2c-Preflight-layers">
      <tbody>
        {plan.layers.map(layer => (
          <tr key={layer.role} data-layer={layer.role}>
            <th scope="row">
              {layer.role === 'code' ? trans.__('Code') : trans.__('Venv')}
            </th>
            <td>{trans._n('%1 file', '%1 files', layer.files)}</td>
            <td>{formatBytes(layer.bytes)}</td>
          </tr>
        ))}
        <tr className="j2c-Preflight-total">
          <th scope="row">{trans.__('Total')}</th>
          <td />
          <td>{formatBytes(plan.total_bytes)}</td>
        </tr>
      </tbody>
    </table>
  );
}

function Largest(props: {
  plan: PackPlan;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { plan, trans } = props;
  const largest = ([] as { path: string; bytes: number; role: string }[])
    .concat(
      ...plan.layers.map(layer =>
        layer.largest.map(item => ({ ...item, role: layer.role }))
      )
    )
    .sort((a, b) => b.bytes - a.bytes)
    .slice(0, LARGEST_SHOWN);
  if (!largest.length) {
    return null;
  }
  return (
    <details className="j2c-Preflight-largest">
      <summary>{trans.__('Largest files')}</summary>
      <ul>
        {largest.map(item => (
          <li key={`${item.role}:${item.path}`} title={item.path}>
            <span className="j2c-Preflight-path">{item.path}</span>
            <span className="j2c-Preflight-size">
              {formatBytes(item.bytes)}
            </span>
          </li>
        ))}
      </ul>
    </details>
  );
}

function ruleLabel(group: ExcludedGroup, trans: TranslationBundle): string {
  switch (group.rule) {
    case 'secret':
      return trans.__('secrets');
    case 'venv':
    case 'nested_venv':
      return trans.__('virtual environments');
    case 'default':
    case 'cache_dir':
      return trans.__('caches and tool folders');
    case '.gitignore':
    case '.j2cignore':
      return trans.__('ignored by %1', group.rule);
    case 'exclude':
      return trans.__('your excludes');
    default:
      return group.rule.replace('_', ' ');
  }
}

function Excluded(props: {
  plan: PackPlan;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { plan, trans } = props;
  if (!plan.excluded.length) {
    return null;
  }
  const secrets = plan.excluded.filter(group => group.rule === 'secret');
  return (
    <details className="j2c-Preflight-excluded" open={secrets.length > 0}>
      <summary>
        {trans._n(
          '%1 path left out',
          '%1 paths left out',
          plan.excluded.reduce((sum, group) => sum + group.count, 0)
        )}
      </summary>
      <ul>
        {plan.excluded.map(group => (
          <li
            key={`${group.layer}:${group.rule}`}
            data-rule={group.rule}
            className={group.rule === 'secret' ? 'j2c-mod-secret' : undefined}
            title={group.paths.join('\n')}
          >
            {trans.__(
              '%1 (%2): %3',
              ruleLabel(group, trans),
              group.count,
              group.paths.slice(0, 3).join(', ')
            )}
            {group.count > 3 ? ' …' : ''}
          </li>
        ))}
      </ul>
    </details>
  );
}

/** The job's image against the lab: what it lacks, what ships, the version conflicts. */
export function ImageDifferences(props: {
  report: ImageReport | null | undefined;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { report, trans } = props;
  if (!report) {
    return null;
  }
  if (!report.known) {
    return <div className="j2c-Preflight-image">{report.message}</div>;
  }
  const missing = report.missing ?? [];
  const versions = report.versions ?? [];
  const unprovided = report.unprovided ?? [];
  const shipping = report.shipping;
  if (!missing.length && !versions.length && !unprovided.length) {
    return null;
  }
  const shipped = shipping?.enabled && (shipping.names ?? []).length > 0;
  return (
    <details className="j2c-Preflight-image" open>
      <summary>{trans.__('%1 differs from the lab', report.target)}</summary>
      {unprovided.length ? (
        <div className="j2c-Preflight-refused" role="alert">
          <ul className="j2c-Preflight-unprovided">
            {unprovided.map(item => (
              <li key={item.name} data-import={item.name}>
                {trans.__(
                  '%1 imports %2: not in the venv, the lab or the image',
                  (item.imported_by ?? [])[0] ?? '',
                  item.name
                )}
              </li>
            ))}
          </ul>
          {trans.__(
            'Not sent unless "%1" (Advanced) is ticked: install it in the venv, or use an image that has it.',
            trans.__('Send even if imports are missing')
          )}
        </div>
      ) : null}
      {missing.length ? (
        <ul className="j2c-Preflight-missing">
          {missing.map(item => (
            <li key={item.name} data-package={item.name}>
              {trans.__(
                '%1 %2 (%3): not in the image',
                item.name,
                item.lab_version,
                formatBytes(item.bytes)
              )}
            </li>
          ))}
        </ul>
      ) : null}
      {shipped && shipping ? (
        <div className="j2c-Preflight-shipping">
          {trans.__(
            "Shipping %1 from the lab's base Python: %2 — %3",
            trans._n(
              '%1 package',
              '%1 packages',
              (shipping.names ?? []).length
            ),
            (shipping.names ?? []).join(', '),
            formatBytes(shipping.bytes ?? 0)
          )}
        </div>
      ) : shipping?.off_reason ? (
        <div className="j2c-Preflight-warning j2c-Preflight-notShipped">
          {trans.__(
            'Not shipped (%1): the job cannot import them',
            shipping.off_reason
          )}
        </div>
      ) : null}
      {versions.map(item => (
        <div key={item.name} className="j2c-Preflight-conflict">
          {trans.__(
            '%1: %2 in the lab, %3 in the image',
            item.name,
            item.lab_version,
            item.image_version
          )}
          {(item.broken ?? []).map(broken => (
            <div key={broken.by} className="j2c-Preflight-requirement">
              {trans.__('%1 needs %2', broken.by, broken.requirement)}
            </div>
          ))}
        </div>
      ))}
      {(shipping?.breaks_image ?? []).map(broken => (
        <div key={broken.by} className="j2c-Preflight-refused" role="alert">
          {trans.__(
            "The lab's version breaks the image's own packages: %1 needs %2",
            broken.by,
            broken.requirement
          )}
        </div>
      ))}
    </details>
  );
}

export function PreflightSummary(props: {
  preflight: IPreflightState;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { preflight, trans } = props;
  const { plan } = preflight;
  if (!plan && !preflight.running) {
    return null;
  }
  return (
    <section
      className="j2c-Preflight"
      aria-label={trans.__('What will be sent')}
      aria-busy={preflight.running}
    >
      <h3>{trans.__('What will be sent')}</h3>
      {plan ? (
        <>
          <Layers plan={plan} trans={trans} />
          {plan.refused ? (
            <div className="j2c-Preflight-refused" role="alert">
              {plan.refused}
            </div>
          ) : null}
          {plan.warnings.map(warning => (
            <div
              key={`${warning.code}:${warning.path ?? ''}`}
              className="j2c-Preflight-warning"
            >
              {warning.message}
            </div>
          ))}
          <ImageDifferences report={plan.image_report} trans={trans} />
          <Excluded plan={plan} trans={trans} />
          <Largest plan={plan} trans={trans} />
        </>
      ) : (
        <div className="j2c-Preflight-running">{trans.__('Checking…')}</div>
      )}
    </section>
  );
}
