/**
 * `JobProgress`: a job's events folded into what the log panel's timeline shows: one step per
 * stage the user cares about (scan, pack, upload, submit, queued, running, results), each
 * waiting, active (with percent and rate), done, reused (with the reason) or failed.
 */
import { isTerminal } from '../format';
import { Event, JobStatus, StageState } from '../models';

export const STEPS = [
  'scan',
  'pack',
  'upload',
  'submit',
  'queued',
  'running',
  'results'
] as const;

export type StepName = (typeof STEPS)[number];

/** A step's state: the server's stage states, plus not yet reached and skipped. */
export type StepState = StageState | 'waiting' | 'skipped';

export interface IStep {
  name: StepName;
  state: StepState;
  /** The pipeline's own words: what it did, or why it was reused or failed. */
  detail: string;
  percent: number | null;
  /** Bytes per second, while packing or uploading. */
  rate: number | null;
  seconds: number | null;
  startedAt: number | null;
  /** Done by this job before a server restart, and picked up from there. */
  resumed: boolean;
}

/** Pipeline stages that have a step of their own; configure belongs to submit. */
const STAGE_STEP: { [stage: string]: StepName | undefined } = {
  scan: 'scan',
  pack: 'pack',
  upload: 'upload',
  configure: 'submit',
  submit: 'submit',
  results: 'results'
};

function numberIn(
  data: { [key: string]: unknown } | undefined,
  key: string
): number | null {
  const value = data?.[key];
  return typeof value === 'number' ? value : null;
}

export class JobProgress {
  constructor() {
    this.steps = STEPS.map(name => ({
      name,
      state: 'waiting',
      detail: '',
      percent: null,
      rate: null,
      seconds: null,
      startedAt: null,
      resumed: false
    }));
  }

  readonly steps: IStep[];
  status: JobStatus | null = null;
  message = '';
  exitCode: number | null = null;
  firstTime: number | null = null;
  lastTime: number | null = null;
  /** Errors the pipeline reported (also written to the log). */
  errors: string[] = [];

  get ended(): boolean {
    return isTerminal(this.status);
  }

  step(name: StepName): IStep {
    return this.steps[STEPS.indexOf(name)];
  }

  /** Fold one event in; false when it changes nothing the timeline shows (log lines). */
  apply(event: Event): boolean {
    this.firstTime ??= event.time;
    this.lastTime = event.time;
    switch (event.kind) {
      case 'stage':
        return this._stage(event);
      case 'progress':
        return this._progress(event);
      case 'status':
        return this._status(event);
      case 'result':
        this.exitCode = numberIn(event.data, 'exit_code');
        return true;
      case 'error':
        this.errors.push(event.text ?? '');
        this._failActive(event.text ?? '');
        return true;
      default:
        return false;
    }
  }

  /** The step a stage or progress event is about, if the timeline shows its stage. */
  private _stepOf(event: Event): IStep | null {
    const name = event.stage ? STAGE_STEP[event.stage] : undefined;
    return name ? this.step(name) : null;
  }

  private _stage(event: Event): boolean {
    const step = this._stepOf(event);
    if (!step) {
      return false;
    }
    const configure = event.stage === 'configure';
    switch (event.state) {
      case 'started':
        if (!configure || step.state === 'waiting') {
          this._set(step, 'started', event.text ?? '');
          step.startedAt = event.time;
        }
        break;
      case 'finished':
        if (!configure) {
          this._set(step, 'finished', event.text ?? '');
          step.seconds =
            numberIn(event.data, 'seconds') ??
            (step.startedAt !== null ? event.time - step.startedAt : null);
        }
        break;
      case 'reused':
        if (configure) {
          break;
        }
        if (step.state === 'finished' || event.data?.resumed === true) {
          // This job's own stage, picked up again after a server restart: it stays done (it
          // reused nothing from another job), and says it resumed.
          step.state = 'finished';
          step.detail = [step.detail, event.text ?? '']
            .filter(part => part)
            .join('; ');
          step.resumed = true;
        } else {
          this._set(step, 'reused', event.text ?? '');
        }
        break;
      case 'failed':
        this._set(step, 'failed', event.text ?? '');
        break;
      default:
        return false;
    }
    return true;
  }

  private _progress(event: Event): boolean {
    const step = this._stepOf(event);
    if (!step) {
      return false;
    }
    if (step.state === 'waiting') {
      step.state = 'started';
    }
    step.percent = numberIn(event.data, 'percent');
    step.rate = numberIn(event.data, 'rate');
    return true;
  }

  private _status(event: Event): boolean {
    const status = event.status ?? null;
    this.status = status;
    this.message = event.text ?? '';
    const submit = this.step('submit');
    const queued = this.step('queued');
    const running = this.step('running');
    switch (status) {
      case 'submitted':
        if (submit.state === 'started' || submit.state === 'waiting') {
          this._set(submit, 'finished', submit.detail || this.message);
        }
        break;
      case 'queued':
        this._set(queued, 'started', this.message);
        queued.startedAt = event.time;
        break;
      case 'running':
        this._finish(queued, event.time);
        this._set(running, 'started', this.message);
        running.startedAt = event.time;
        break;
      case 'succeeded':
        this._finish(queued, event.time);
        if (running.state === 'waiting') {
          running.state = 'finished'; // it ran, faster than the scheduler reported it running
        }
        this._finish(running, event.time);
        break;
      case 'failed':
      case 'lost':
      case 'cancelled':
        this._failActive(this.message);
        break;
      default:
        break;
    }
    if (isTerminal(status)) {
      for (const step of this.steps) {
        if (step.state === 'waiting') {
          step.state = 'skipped';
        } else if (step.state === 'started') {
          this._set(
            step,
            status === 'succeeded' ? 'finished' : 'failed',
            step.detail
          );
        }
      }
    }
    return true;
  }

  private _finish(step: IStep, time: number): void {
    if (step.state === 'started') {
      step.state = 'finished';
      step.seconds = step.startedAt !== null ? time - step.startedAt : null;
    } else if (step.state === 'waiting') {
      step.state = 'skipped';
    }
  }

  private _failActive(detail: string): void {
    let targets = this.steps.filter(step => step.state === 'started');
    if (!targets.length && this.step('submit').state === 'finished') {
      // Ended before it was seen running: the run is what failed.
      targets = [this.step('running')].filter(step => step.state === 'waiting');
    }
    for (const step of targets) {
      this._set(step, 'failed', detail || step.detail);
    }
  }

  private _set(step: IStep, state: StepState, detail: string): void {
    step.state = state;
    step.detail = detail;
    if (state === 'finished' && step.percent !== null) {
      step.percent = 100;
    }
    if (state !== 'started') {
      step.rate = null;
    }
  }
}
