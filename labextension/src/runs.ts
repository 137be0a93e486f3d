// The runs panel: the server's newest runs with their status, report, cancel and resume.

import { Widget } from '@lumino/widgets';

import { IRun, ISnapshot } from './api';
import { h, refreshTimes, syncChildren, when } from './dom';
import { InboxFeed } from './feed';

export const RUNS_ID = 'iterion-runs';

/** Statuses a run can be cancelled from (a running one is asked to stop by its owner). */
export const CANCELLABLE = ['running', 'paused_waiting_human', 'failed_resumable', 'interrupted'];
/** Statuses a resume may start from (runtime.records.RESUMABLE). */
export const RESUMABLE = ['paused_waiting_human', 'failed_resumable', 'cancelled', 'interrupted'];

/** Each status in words. */
export const STATUS_TEXT: Record<string, string> = {
  running: 'running',
  paused_waiting_human: 'waiting for an answer',
  finished: 'finished',
  failed: 'failed',
  failed_resumable: 'failed (resumable)',
  cancelled: 'cancelled',
  interrupted: 'interrupted — nothing executes it'
};

export interface IRunActions {
  report(run: IRun): void;
  cancel(run: IRun): Promise<void>;
  resume(run: IRun): void;
  questions(run: IRun): void;
}

export class RunsPanel extends Widget {
  constructor(
    private readonly feed: InboxFeed,
    private readonly actions: IRunActions
  ) {
    super();
    this.id = RUNS_ID;
    this.addClass('iterion-sidebar');
    this.addClass('iterion-runs-panel');
    this.title.caption = 'iterion: runs';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'iterion runs');
    this._head = h('div', { class: 'iterion-head' }, h('h2', {}, 'Runs'));
    this._list = h('ul', { class: 'iterion-runs-list' });
    this.node.append(this._head, this._list);
    feed.changed.connect(this._draw, this);
    this._draw();
    this._timer = window.setInterval(() => refreshTimes(this.node), 20000);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    this.feed.changed.disconnect(this._draw, this);
    super.dispose();
  }

  private _draw(): void {
    const snap: ISnapshot | null = this.feed.snapshot;
    const runs = snap?.runs ?? [];
    const asking = new Map<string, number>();
    for (const q of snap?.pending ?? []) {
      asking.set(q.run_id, (asking.get(q.run_id) ?? 0) + 1);
    }
    if (snap && !runs.length) {
      this._list.replaceChildren(h('li', { class: 'iterion-empty' }, 'No runs in this store yet.'));
      return;
    }
    if (this._list.firstElementChild?.classList.contains('iterion-empty')) {
      this._list.replaceChildren();
    }
    // a run's row is drawn again when anything shown in it changes
    syncChildren(
      this._list,
      runs,
      r =>
        `${r.id}|${r.status}|${r.updated_at}|${asking.get(r.id) ?? 0}|${r.owner?.pid ?? ''}` +
        `|${this._cancelling.has(r.id)}`,
      r => this._row(r, asking.get(r.id) ?? 0)
    );
  }

  private _row(run: IRun, questions: number): HTMLElement {
    const buttons = h('div', { class: 'iterion-controls' });
    const button = (label: string, cls: string, title: string, act: () => void): HTMLElement =>
      h('button', { type: 'button', class: `${cls}`, title, onclick: act }, label);
    buttons.append(button('Report', 'iterion-report', `open the report of run ${run.id} in a tab`, () => this.actions.report(run)));
    if (questions) {
      buttons.append(
        button(
          `${questions} question${questions > 1 ? 's' : ''}`,
          'iterion-questions',
          'show its questions in the questions sidebar',
          () => this.actions.questions(run)
        )
      );
    }
    if (this._cancelling.has(run.id)) {
      // the request waits (up to half a minute) for the run's owner to stop it
      buttons.append(
        h(
          'button',
          {
            type: 'button',
            class: 'iterion-cancel',
            disabled: true,
            'aria-busy': 'true',
            title: `waiting for run ${run.id} to stop`
          },
          'Cancelling…'
        )
      );
    } else if (CANCELLABLE.includes(run.status)) {
      buttons.append(
        button('Cancel', 'iterion-cancel', `cancel run ${run.id} (it stays resumable)`, () => {
          this._cancelling.add(run.id);
          this._draw();
          void this.actions.cancel(run).finally(() => {
            this._cancelling.delete(run.id);
            this._draw();
          });
        })
      );
    }
    if (RESUMABLE.includes(run.status)) {
      buttons.append(
        button(
          'Resume…',
          'iterion-resume',
          'copy the command that resumes it in a notebook (the Jupyter server runs no workflows)',
          () => this.actions.resume(run)
        )
      );
    }
    const owner = run.owner ? ` · pid ${run.owner.pid} on ${run.owner.host}` : '';
    return h(
      'li',
      { class: 'iterion-runs-row', 'data-run': run.id, 'data-status': run.status },
      h(
        'div',
        { class: 'iterion-runs-title' },
        h('span', { class: 'iterion-workflow' }, run.workflow),
        h('span', { class: 'iterion-status', 'data-status': run.status }, STATUS_TEXT[run.status] ?? run.status)
      ),
      h('div', { class: 'iterion-meta' }, h('code', {}, run.id), ' · updated ', when(run.updated_at), owner),
      run.error ? h('div', { class: 'iterion-meta iterion-runs-error' }, run.error) : null,
      buttons
    );
  }

  /** Runs whose cancel request is in flight: their button says so and takes no click. */
  private readonly _cancelling = new Set<string>();
  private readonly _head: HTMLElement;
  private readonly _list: HTMLElement;
  private readonly _timer: number;
}
