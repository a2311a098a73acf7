/** The Compute form: labelled fields bound to a `ComputeForm`, errors inline. */
import { TranslationBundle } from '@jupyterlab/translation';
import {
  Button,
  HTMLSelect,
  ReactWidget,
  addIcon,
  closeIcon
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { shortId } from '../format';
import { unhonouredReason } from './labels';
import { ComputeForm, IFormProblem } from './model';
import { PreflightSummary } from './preflight';
import { ErrorKey, FormField, ResourceField, filledParams } from './values';

const fieldId = (field: string): string => `j2c-field-${field}`;

interface IFieldProps {
  form: ComputeForm;
  field: FormField;
  label: string;
  hint?: string;
  /** Why the field is off (the scheduler cannot honour it): disabled, this as its tooltip. */
  offReason?: string | null;
  children: (props: IControlProps) => JSX.Element;
}

/** What every control gets: its id, value, change handler and error wiring. */
interface IControlProps {
  id: string;
  name: string;
  value: string;
  onChange: (
    event: React.ChangeEvent<
      HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement
    >
  ) => void;
  'aria-invalid': boolean;
  'aria-describedby'?: string;
  disabled?: boolean;
  title?: string;
  placeholder?: string;
}

/**
 * A label, a control and, below it, its hint or its error. A field the scheduler cannot
 * honour is disabled and empty, its reason in its tooltip and its accessible description.
 */
function Field(props: IFieldProps): JSX.Element {
  const { form, field, label, hint, children, offReason } = props;
  const id = fieldId(field);
  const error = form.errors[field];
  const noteId = error || hint || offReason ? `${id}-note` : undefined;
  const off = offReason
    ? {
        disabled: true,
        title: offReason,
        value: '',
        placeholder: '—'
      }
    : {};
  return (
    <div
      className="j2c-Field"
      data-field={field}
      data-off={offReason ? 'true' : undefined}
      title={offReason ?? undefined}
    >
      <label htmlFor={id}>{label}</label>
      {children({
        id,
        name: field,
        value: form.values[field],
        onChange: event => form.set(field, event.target.value),
        'aria-invalid': !!error,
        'aria-describedby': noteId,
        ...off
      })}
      {offReason && !error ? (
        <div id={noteId} className="j2c-u-screenReader">
          {offReason}
        </div>
      ) : error ? (
        <div id={noteId} className="j2c-Field-error" role="alert">
          {error}
        </div>
      ) : hint ? (
        <div id={noteId} className="j2c-Field-hint">
          {hint}
        </div>
      ) : null}
    </div>
  );
}

const input = (placeholder: string, type = 'text') =>
  function TextInput(props: IControlProps): JSX.Element {
    return (
      <input
        {...props}
        type={type}
        className="jp-mod-styled j2c-Input"
        placeholder={placeholder}
        spellCheck={false}
      />
    );
  };

const textarea = (placeholder: string) =>
  function TextArea(props: IControlProps): JSX.Element {
    return (
      <textarea
        {...props}
        className="jp-mod-styled j2c-Input"
        placeholder={placeholder}
        rows={2}
        spellCheck={false}
      />
    );
  };

interface IFormProps {
  form: ComputeForm;
  trans: TranslationBundle;
  onSend: () => void;
}

function ImageField(props: IFormProps): JSX.Element {
  const { form, trans } = props;
  const config = form.config;
  const options = (config?.images ?? []).map(choice => ({
    value: choice.image,
    label:
      choice.name === choice.image
        ? choice.image
        : `${choice.name} (${choice.image})`
  }));
  const current = form.values.image;
  if (current && !options.some(option => option.value === current)) {
    options.unshift({ value: current, label: current });
  }
  if (!options.length) {
    options.push({ value: '', label: trans.__("The scheduler's default") });
  }
  return (
    <Field form={form} field="image" label={form.labels.image}>
      {control => <HTMLSelect {...control} options={options} />}
    </Field>
  );
}

function ResourceFields(props: IFormProps): JSX.Element {
  const { form, trans } = props;
  const labels = form.labels;
  const presets = form.settings.memoryPresets;
  const off = form.unhonoured;
  const reason = (field: ResourceField): string | null =>
    off.has(field) ? unhonouredReason(field, form.scheduler, trans) : null;
  const numberInput = (
    attributes: { min: number; max?: number; step: number },
    placeholder?: string
  ) =>
    function NumberInput(control: IControlProps): JSX.Element {
      return (
        <input
          {...attributes}
          {...control}
          type="number"
          placeholder={control.placeholder ?? placeholder}
          className="jp-mod-styled j2c-Input"
        />
      );
    };
  return (
    <div className="j2c-Resources">
      <Field
        form={form}
        field="gpus"
        label={labels.gpus}
        offReason={reason('gpus')}
      >
        {numberInput({ min: 0, max: 64, step: 1 })}
      </Field>
      <Field
        form={form}
        field="nodes"
        label={labels.nodes}
        offReason={reason('nodes')}
      >
        {control => (
          <input
            min={1}
            max={256}
            step={1}
            title={trans.__('GPUs, CPUs and memory are per node')}
            {...control}
            type="number"
            className="jp-mod-styled j2c-Input"
          />
        )}
      </Field>
      <Field
        form={form}
        field="cpus"
        label={labels.cpus}
        offReason={reason('cpus')}
      >
        {numberInput({ min: 0.5, step: 0.5 }, trans.__('auto'))}
      </Field>
      <Field
        form={form}
        field="memory"
        label={labels.memory}
        offReason={reason('memory')}
      >
        {control => (
          <>
            <input
              list="j2c-memory-presets"
              {...control}
              placeholder={control.placeholder ?? trans.__('auto')}
              className="jp-mod-styled j2c-Input"
              spellCheck={false}
            />
            <datalist id="j2c-memory-presets">
              {presets.map(preset => (
                <option key={preset} value={preset} />
              ))}
            </datalist>
          </>
        )}
      </Field>
      <Field
        form={form}
        field="timeLimit"
        label={labels.timeLimit}
        offReason={reason('timeLimit')}
      >
        {numberInput({ min: 1, step: 1 }, trans.__('none'))}
      </Field>
    </div>
  );
}

function AdvancedFields(props: IFormProps): JSX.Element {
  const { form, trans } = props;
  const schedulers = form.config?.scheduler_kinds ?? [];
  return (
    <details className="j2c-Advanced">
      <summary>{trans.__('Advanced')}</summary>
      <Field form={form} field="compression" label={form.labels.compression}>
        {input(
          trans.__('%1 (server default)', form.config?.compression_level ?? 3),
          'number'
        )}
      </Field>
      <Field
        form={form}
        field="excludes"
        label={form.labels.excludes}
        hint={trans.__('gitignore patterns, one a line')}
      >
        {textarea('data/raw/\n*.ckpt')}
      </Field>
      <Field
        form={form}
        field="maxAttempts"
        label={form.labels.maxAttempts}
        hint={trans.__(
          'New attempts from the last checkpoint after a preemption or a lost node; 0: none'
        )}
      >
        {input(
          trans.__('%1 (server default)', form.config?.max_attempts ?? 3),
          'number'
        )}
      </Field>
      <Field form={form} field="scheduler" label={form.labels.scheduler}>
        {control => <HTMLSelect {...control} options={schedulers} />}
      </Field>
      <CheckField
        id="noWait"
        checked={form.values.noWait}
        onChange={checked => form.setNoWait(checked)}
        label={trans.__("Don't wait: send without opening the log")}
      />
      <CheckField
        id="allowMissingImports"
        checked={form.values.allowMissingImports}
        onChange={checked => form.setAllowMissingImports(checked)}
        label={form.labels.allowMissingImports}
        title={trans.__(
          'An import that neither the venv, the lab nor the image provides stops the send before upload; tick to send anyway (the job may fail with ModuleNotFoundError).'
        )}
      />
    </details>
  );
}

/** A checkbox of the form with its label (the settings that are on or off). */
function CheckField(props: {
  id: string;
  checked: boolean;
  onChange: (checked: boolean) => void;
  label: string;
  title?: string;
}): JSX.Element {
  return (
    <div className="j2c-Field j2c-Field-check">
      <input
        id={fieldId(props.id)}
        type="checkbox"
        checked={props.checked}
        onChange={event => props.onChange(event.target.checked)}
      />
      <label htmlFor={fieldId(props.id)} title={props.title}>
        {props.label}
      </label>
    </div>
  );
}

/** "3 × 2 = 6 variants" (one parameter: "3 variants"). */
function variantCount(
  size: { factors: number[]; total: number },
  trans: TranslationBundle
): string {
  const variants = trans._n('%1 variant', '%1 variants', size.total);
  return size.factors.length > 1
    ? trans.__('%1 = %2', size.factors.join(' × '), variants)
    : variants;
}

/** The swept names typed so far, as the `{name}` placeholders Arguments can use. */
function placeholderList(form: ComputeForm): string {
  return filledParams(form.values.sweepParams)
    .map(param => param.name.trim())
    .filter(name => name)
    .map(name => `{${name}}`)
    .join(', ');
}

/**
 * The Sweep section, folded by default: one row per parameter (NAME = comma-separated values),
 * add/remove, max parallel, the live variant count, and the section's errors (the server's
 * refusal of the sweep included). The rows live in the model; this only renders them.
 */
function SweepSection(props: IFormProps): JSX.Element {
  const { form, trans } = props;
  const params = form.values.sweepParams;
  const size = form.sweepSize;
  const error = form.errors.sweep;
  // The row (by id) or control whose input takes the focus after an add or a remove.
  const [focus, setFocus] = React.useState<string | null>(null);
  React.useEffect(() => {
    if (focus) {
      document.getElementById(focus)?.focus();
      setFocus(null);
    }
  }, [focus]);
  const rowId = (id: number, part: 'name' | 'values') =>
    fieldId(`sweep-${id}-${part}`);
  const addId = fieldId('sweep-add');
  const hintId = fieldId('sweep-hint');
  const errorId = fieldId('sweep-error');
  const remove = (index: number) => {
    const next = params[index + 1] ?? params[index - 1];
    form.removeSweepParam(params[index].id);
    setFocus(next ? rowId(next.id, 'name') : addId);
  };
  return (
    <details
      className="j2c-SweepForm"
      data-j2c="sweep-section"
      open={form.sweepOpen}
      onToggle={event => form.setSweepOpen(event.currentTarget.open)}
    >
      <summary>
        {trans.__('Sweep')}
        {size ? (
          <span className="j2c-SweepForm-badge" data-j2c="sweep-summary-count">
            {' '}
            {trans._n('(%1 variant)', '(%1 variants)', size.total)}
          </span>
        ) : null}
      </summary>
      <div id={hintId} className="j2c-Field-hint">
        {trans.__(
          'Send one job per combination of values. Write {name} in Arguments (or an environment value) where each value goes.'
        )}
      </div>
      {params.length ? (
        <ol
          className="j2c-SweepForm-params"
          aria-label={trans.__('Swept parameters')}
          aria-describedby={hintId}
        >
          {params.map((param, index) => {
            const rowError = form.errors[`sweep.${param.id}`];
            const noteId = rowError ? `${rowId(param.id, 'name')}-note` : '';
            const number = index + 1;
            return (
              <li
                key={param.id}
                className="j2c-SweepForm-param"
                data-j2c="sweep-param"
              >
                <div className="j2c-SweepForm-row">
                  <label
                    htmlFor={rowId(param.id, 'name')}
                    className="j2c-u-screenReader"
                  >
                    {trans.__('Name of parameter %1', number)}
                  </label>
                  <input
                    id={rowId(param.id, 'name')}
                    className="jp-mod-styled j2c-Input j2c-SweepForm-name"
                    data-j2c="sweep-name"
                    value={param.name}
                    placeholder={trans.__('name')}
                    spellCheck={false}
                    aria-invalid={!!rowError}
                    aria-describedby={noteId || undefined}
                    onChange={event =>
                      form.setSweepParam(param.id, 'name', event.target.value)
                    }
                  />
                  <span className="j2c-SweepForm-equals" aria-hidden="true">
                    =
                  </span>
                  <label
                    htmlFor={rowId(param.id, 'values')}
                    className="j2c-u-screenReader"
                  >
                    {trans.__(
                      'Values of parameter %1, comma-separated',
                      number
                    )}
                  </label>
                  <input
                    id={rowId(param.id, 'values')}
                    className="jp-mod-styled j2c-Input j2c-SweepForm-values"
                    data-j2c="sweep-values"
                    value={param.values}
                    placeholder="1e-3, 3e-4, 1e-4"
                    spellCheck={false}
                    aria-invalid={!!rowError}
                    aria-describedby={noteId || undefined}
                    onChange={event =>
                      form.setSweepParam(param.id, 'values', event.target.value)
                    }
                  />
                  <Button
                    type="button"
                    minimal
                    small
                    className="j2c-SweepForm-remove"
                    data-j2c="sweep-remove"
                    aria-label={trans.__('Remove parameter %1', number)}
                    title={trans.__('Remove parameter %1', number)}
                    onClick={() => remove(index)}
                  >
                    <closeIcon.react tag="span" elementPosition="center" />
                  </Button>
                </div>
                {rowError ? (
                  <div id={noteId} className="j2c-Field-error" role="alert">
                    {rowError}
                  </div>
                ) : null}
              </li>
            );
          })}
        </ol>
      ) : null}
      <Button
        type="button"
        id={addId}
        className="jp-mod-styled j2c-SweepForm-add"
        data-j2c="sweep-add"
        onClick={() => setFocus(rowId(form.addSweepParam(), 'name'))}
      >
        <addIcon.react tag="span" elementPosition="center" />
        {trans.__('Add parameter')}
      </Button>
      <Field
        form={form}
        field="maxParallel"
        label={form.labels.maxParallel}
        hint={trans.__('Variants running at once; empty: all')}
      >
        {control => (
          <input
            {...control}
            type="number"
            min={1}
            step={1}
            placeholder={trans.__('all')}
            className="jp-mod-styled j2c-Input"
          />
        )}
      </Field>
      <Field
        form={form}
        field="retries"
        label={form.labels.retries}
        hint={trans.__('Re-runs of a variant that exits non-zero; empty: none')}
      >
        {control => (
          <input
            {...control}
            type="number"
            min={0}
            step={1}
            placeholder="0"
            className="jp-mod-styled j2c-Input"
          />
        )}
      </Field>
      <div
        className="j2c-SweepForm-count"
        data-j2c="sweep-count"
        role="status"
        aria-live="polite"
      >
        {size
          ? variantCount(size, trans)
          : trans.__('No parameters: a single job.')}
      </div>
      {error ? (
        <div
          id={errorId}
          className="j2c-Field-error j2c-SweepForm-error"
          data-j2c="sweep-error"
          role="alert"
        >
          {error}
        </div>
      ) : null}
    </details>
  );
}

/** The ship/skip choice for lab-base packages the image lacks, shown once the preflight
 * found some; the conflicts' choice when the image has some at other versions. */
function BaseFields(props: IFormProps): JSX.Element | null {
  const { form, trans } = props;
  const report = form.preflight.plan?.image_report;
  if (!report?.shipping) {
    return null;
  }
  const conflicts = (report.versions ?? []).length > 0;
  return (
    <div className="j2c-BaseFields">
      <Field form={form} field="baseShip" label={form.labels.baseShip}>
        {control => (
          <HTMLSelect
            {...control}
            options={[
              { label: trans.__('Server default'), value: '' },
              { label: trans.__('Ship them with the job'), value: 'ship' },
              { label: trans.__("Don't ship them"), value: 'skip' }
            ]}
          />
        )}
      </Field>
      {conflicts ? (
        <Field
          form={form}
          field="baseConflicts"
          label={form.labels.baseConflicts}
        >
          {control => (
            <HTMLSelect
              {...control}
              options={[
                { label: trans.__('Server default'), value: '' },
                {
                  label: trans.__(
                    "Auto: the lab's where a requirement needs it"
                  ),
                  value: 'auto'
                },
                { label: trans.__("Ship the lab's version"), value: 'ship' },
                { label: trans.__("Use the image's version"), value: 'image' }
              ]}
            />
          )}
        </Field>
      ) : null}
    </div>
  );
}

/** Bring a field into view and into focus (a Sweep row's error: the section's first input). */
function focusField(key: ErrorKey): void {
  const target = key.startsWith('sweep')
    ? document.querySelector<HTMLElement>(
        '[data-j2c="sweep-section"] [aria-invalid="true"], [data-j2c="sweep-section"] summary'
      )
    : document.getElementById(fieldId(key));
  target?.closest('details')?.setAttribute('open', '');
  target?.scrollIntoView({ block: 'center' });
  target?.focus();
}

/**
 * Beside the Send button: everything that stops the send, each named by its field's label (a
 * button that brings the field into view), so an error under a field scrolled away is seen.
 */
function Problems(props: {
  problems: IFormProblem[];
  trans: TranslationBundle;
}): JSX.Element | null {
  const { problems, trans } = props;
  if (!problems.length) {
    return null;
  }
  return (
    <div className="j2c-Form-problems" role="alert" data-j2c="form-problems">
      <ul
        aria-label={trans._n(
          '%1 problem stops the send',
          '%1 problems stop the send',
          problems.length
        )}
      >
        {problems.map(problem => (
          <li key={problem.key ?? ''} data-problem={problem.key ?? 'form'}>
            {problem.key ? (
              <>
                <button
                  type="button"
                  className="j2c-Form-problemField"
                  title={trans.__('Go to %1', problem.label)}
                  onClick={() => focusField(problem.key as ErrorKey)}
                >
                  {problem.label}
                </button>
                {': '}
              </>
            ) : null}
            {problem.message}
          </li>
        ))}
      </ul>
    </div>
  );
}

/** After "Run again…": which job the form was filled from (the next send is a new run). */
function RerunNote(props: IFormProps): JSX.Element | null {
  const { form, trans } = props;
  const source = form.rerunOf;
  if (!source) {
    return null;
  }
  return (
    <div className="j2c-Form-rerun" data-j2c="rerun-note" role="status">
      {trans.__(
        'Filled from job %1 (%2): change what you need, then send a new run.',
        source.name,
        shortId(source.id)
      )}
    </div>
  );
}

/** The whole form; Enter runs the preflight check, the button sends. */
export function ComputeFormView(props: IFormProps): JSX.Element {
  const { form, trans, onSend } = props;
  const placeholders = placeholderList(form);
  return (
    <form
      className="j2c-Form"
      aria-label={trans.__('Send a job to Compute')}
      onSubmit={event => {
        event.preventDefault();
        void form.check();
      }}
    >
      <Field
        form={form}
        field="project"
        label={form.labels.project}
        hint={trans.__('Relative to the server root; empty: the root')}
      >
        {input(trans.__('(server root)'))}
      </Field>
      <Field
        form={form}
        field="entry"
        label={form.labels.entry}
        hint={trans.__(
          'A .py script or .ipynb notebook in the project, or -m module'
        )}
      >
        {input('train.py')}
      </Field>
      <Field
        form={form}
        field="venv"
        label={form.labels.venv}
        hint={
          form.venvReason ||
          trans.__('Relative to the server root; empty: none')
        }
      >
        {input(trans.__('(none)'))}
      </Field>
      <ImageField {...props} />
      <ResourceFields {...props} />
      <Field
        form={form}
        field="args"
        label={form.labels.args}
        hint={
          placeholders
            ? trans.__('Each variant fills in %1 here', placeholders)
            : undefined
        }
      >
        {input('--epochs 10 --lr 0.01')}
      </Field>
      <Field
        form={form}
        field="env"
        label={form.labels.env}
        hint={trans.__('NAME=value, one a line')}
      >
        {textarea('WANDB_MODE=offline')}
      </Field>
      <SweepSection {...props} />
      <AdvancedFields {...props} />
      <PreflightSummary preflight={form.preflight} trans={trans} />
      <BaseFields {...props} />
      <RerunNote {...props} />
      <Problems problems={form.problems} trans={trans} />
      <div className="j2c-Form-actions">
        <Button type="submit" className="jp-mod-styled j2c-Check">
          {form.preflight.running ? trans.__('Checking…') : trans.__('Check')}
        </Button>
        <Button
          type="button"
          className="jp-mod-styled jp-mod-accept j2c-Send"
          disabled={form.sending}
          onClick={onSend}
        >
          {form.sending ? trans.__('Sending…') : trans.__('Send to Compute')}
        </Button>
      </div>
    </form>
  );
}

/** The form as a sidebar section; re-renders whenever the model changes. */
export class ComputeFormWidget extends ReactWidget {
  constructor(private readonly _props: IFormProps) {
    super();
    this.addClass('j2c-FormSection');
    this.title.label = _props.trans.__('Send a job');
    _props.form.changed.connect(() => this.update(), this);
  }

  render(): JSX.Element {
    return <ComputeFormView {...this._props} />;
  }
}
