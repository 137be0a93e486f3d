// The questions sidebar: every pending question of the server's store, live.

import { Widget } from '@lumino/widgets';

import { Api, ApiError, IAnswerOutcome, IQuestion, ISnapshot } from './api';
import { h, refreshTimes, show, syncChildren, until, when } from './dom';
import { InboxFeed } from './feed';
import { RESUMABLE, STATUS_TEXT } from './runs';

export const INBOX_ID = 'iterion-inbox';

/** How long the confirmation of an answer the agent gets as it runs stays (ms). */
export const SENT_SHOWN_MS = 8000;

/** Statuses in which an answer reaches the run as it is: it runs, or waits for a person. */
export const LIVE = ['running', 'paused_waiting_human'];

/** Whether a run in `status` gets an answer now (an unknown status: nothing to warn about). */
export function isLive(status: string | null | undefined): boolean {
  return !status || LIVE.includes(status);
}

/** A status in words, for a sentence ("run R is …"). */
export function stateText(status: string): string {
  return status === 'interrupted'
    ? 'interrupted (nothing executes it)'
    : (STATUS_TEXT[status] ?? status);
}

type Parts = (string | HTMLElement)[];

/** The commands that resume a run: in a notebook, or in a terminal. */
export function resumeHint(runId: string): Parts {
  return [
    h('code', {}, `%iterion resume ${runId}`),
    ' in a notebook, or ',
    h('code', {}, `iterion-nb resume ${runId}`),
    ' in a terminal'
  ];
}

/** What a question's card says of its run when the run is not live; null when it is. */
export function runState(q: IQuestion): Parts | null {
  const status = q.run_status;
  if (!status || isLive(status)) {
    return null;
  }
  if (!RESUMABLE.includes(status)) {
    return [`Run ${q.run_id} has ended (${stateText(status)}): no agent will read an answer.`];
  }
  if (q.run_cluster && status === 'interrupted') {
    // its cluster's workers take it up again (a resume only if none is up)
    return [
      `Run ${q.run_id} is interrupted; the first worker of its cluster free to take it up ` +
        'resumes it (with no worker up: ',
      ...resumeHint(q.run_id),
      '). An answer given now is saved; the agent gets it then.'
    ];
  }
  return [
    `Run ${q.run_id} is ${stateText(status)}. An answer given now is saved; ` +
      'the agent gets it when the run is resumed: ',
    ...resumeHint(q.run_id),
    '.'
  ];
}

/** Where a question comes from, in words. */
export function origin(q: IQuestion): string {
  const where = q.workflow ? `${q.node_id} in ${q.workflow}` : q.node_id;
  return `${where} · run ${q.run_id}`;
}

/**
 * Who goes on while the question waits: the run stops for a blocking one, and for an
 * async one its sync point (`await_answers`) waits on; otherwise its agent works on,
 * or has finished without the answer.
 */
export function waits(q: IQuestion): string {
  if (q.kind !== 'async' || q.waited_on) {
    return 'the run waits for this answer';
  }
  return q.asker_finished
    ? 'its agent has finished; a later step may read the answer'
    : 'the agent keeps working meanwhile';
}

/** An answer as a person reads it: an option's label rather than its id. */
export function answerText(q: IQuestion): string {
  const labels = new Map(q.options.map(o => [o.id, o.label || o.id]));
  if (typeof q.answers === 'string' && labels.has(q.answers)) {
    return labels.get(q.answers) as string;
  }
  return show(q.answers);
}

/**
 * What answering did, in words. `saved`: the run is not live (interrupted,
 * failed, cancelled), so the answer waits in the store for the run to be resumed.
 */
export function outcomeText(
  outcome: IAnswerOutcome,
  q: IQuestion
): { saved: boolean; parts: Parts; stalled?: boolean } {
  if (outcome.resumed) {
    return { saved: false, parts: ['Answered — the run goes on'] };
  }
  const status = outcome.run_status ?? q.run_status;
  if (outcome.awaiting_worker && status === 'interrupted') {
    // its worker was lost: the next one free takes it up; the message goes once it runs
    return {
      saved: true,
      parts: [
        `Saved — run ${q.run_id} is interrupted; the first worker of its cluster free to take ` +
          'it up resumes it, and the agent gets your answer then (with no worker up: ',
        ...resumeHint(q.run_id),
        ')'
      ]
    };
  }
  if (outcome.resume_error || outcome.awaiting_worker) {
    // a cluster's run: no one resumes it, a worker takes it up once one is up
    const saved = `Saved — every answer run ${q.run_id} waits for is in`;
    const parts: Parts = outcome.resume_error
      ? [
          `${saved}, but this session could not send it to its cluster ` +
            `(${outcome.resume_error}): the first worker that comes up takes it`
        ]
      : [
          `${saved}; no worker of its cluster has taken it up yet: the first one free ` +
            'resumes it (with no worker up: ',
          ...resumeHint(q.run_id),
          ')'
        ];
    return { saved: true, stalled: true, parts };
  }
  if (outcome.resume_needed) {
    // paused with every answer in, and the process that ran it is gone
    return {
      saved: true,
      stalled: true,
      parts: [
        `Saved — every answer run ${q.run_id} waits for is in, but nothing executes it: ` +
          'resume it (',
        ...resumeHint(q.run_id),
        ')'
      ]
    };
  }
  if (status && !isLive(status)) {
    if (!RESUMABLE.includes(status)) {
      return {
        saved: true,
        parts: [`Saved — but run ${q.run_id} has ended (${stateText(status)}): no agent will read it`]
      };
    }
    return {
      saved: true,
      parts: [
        `Saved — run ${q.run_id} is ${stateText(status)}, so the agent gets your answer when ` +
          'the run is resumed (',
        ...resumeHint(q.run_id),
        ')'
      ]
    };
  }
  if (outcome.queued) {
    return { saved: false, parts: ['Sent — the agent reads it at its next turn'] };
  }
  return { saved: false, parts: ['Answered'] };
}

/** Pending questions grouped by the node that asked them (a gate's questions together). */
export function groups(pending: IQuestion[]): { key: string; items: IQuestion[] }[] {
  const found = new Map<string, IQuestion[]>();
  for (const q of pending) {
    const key = `${q.run_id}/${q.node_id}`;
    found.set(key, [...(found.get(key) ?? []), q]);
  }
  return [...found.entries()].map(([key, items]) => ({ key, items }));
}

export class InboxPanel extends Widget {
  constructor(
    private readonly feed: InboxFeed,
    private readonly api: Api,
    private readonly who: () => string
  ) {
    super();
    this.id = INBOX_ID;
    this.addClass('iterion-sidebar');
    this.addClass('iterion-inbox-panel');
    this.title.caption = 'iterion: questions waiting for you';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'iterion questions');
    this._head = h('div', { class: 'iterion-head' });
    // last, and stuck to the bottom of the panel: a message coming or going never
    // moves the cards under the pointer
    this._result = h('div', { class: 'iterion-result-slot', role: 'status', 'aria-live': 'polite' });
    this._list = h('div', { class: 'iterion-pending' });
    this._answered = h('details', { class: 'iterion-answered', open: true });
    this.node.append(this._head, this._list, this._answered, this._result);
    feed.changed.connect(this._draw, this);
    this._draw();
    this._timer = window.setInterval(() => refreshTimes(this.node), 20000);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    window.clearTimeout(this._resultTimer);
    this.feed.changed.disconnect(this._draw, this);
    super.dispose();
  }

  /** Bring one question into view and put the keyboard on its first control. */
  focusQuestion(interactionId: string | undefined): void {
    const cards = Array.from(this.node.querySelectorAll<HTMLElement>('.iterion-card.pending'));
    const card =
      cards.find(c => c.dataset.interaction === interactionId) ?? (interactionId ? null : cards[0]);
    for (const other of cards) {
      other.classList.toggle('iterion-focused', other === card);
    }
    if (!card) {
      return;
    }
    card.scrollIntoView({ block: 'nearest' });
    card.querySelector<HTMLElement>('button, input')?.focus();
  }

  private _draw(): void {
    const snap: ISnapshot | null = this.feed.snapshot;
    const pending = snap?.pending ?? [];
    const state =
      this.feed.state === 'live'
        ? this.feed.problem
          ? `store unavailable: ${this.feed.problem}`
          : 'live'
        : this.feed.state === 'connecting'
          ? 'connecting…'
          : 'reconnecting…';
    this._head.replaceChildren(
      h('h2', {}, 'Questions'),
      h(
        'span',
        { class: 'iterion-count' },
        snap ? (pending.length ? `${pending.length} waiting for an answer` : 'none waiting') : ''
      ),
      h('span', { class: 'iterion-state', 'data-state': this.feed.state }, state)
    );
    if (snap && !pending.length) {
      this._list.replaceChildren(
        h('p', { class: 'iterion-empty' }, 'Nothing is waiting for an answer.')
      );
    } else {
      if (this._list.firstElementChild?.classList.contains('iterion-empty')) {
        this._list.replaceChildren();
      }
      syncChildren(
        this._list,
        groups(pending),
        g => g.key,
        g => this._group(g.items),
        (section, g) => {
          const list = section.querySelector<HTMLElement>('.iterion-group-items');
          if (list) {
            syncChildren(list, g.items, key, q => this._card(q), drawRunState);
          }
        }
      );
    }
    this._drawAnswered(snap?.answered ?? []);
    // a "saved until the run is resumed" message goes once the run is live again
    const shown = this._shown;
    const run = shown?.saved ? snap?.runs.find(r => r.id === shown.run) : undefined;
    // (a paused run that waits for its resume: once it is no longer paused)
    const moved = shown?.stalled ? run?.status !== 'paused_waiting_human' : isLive(run?.status);
    if (run && moved) {
      this._clear();
    }
  }

  private _group(items: IQuestion[]): HTMLElement {
    const first = items[0];
    const list = h('div', { class: 'iterion-group-items' });
    syncChildren(list, items, key, q => this._card(q), drawRunState);
    return h(
      'section',
      { class: 'iterion-group', 'aria-label': `questions of ${first.node_id}` },
      h('div', { class: 'iterion-group-head' }, origin(first)),
      list
    );
  }

  private _card(q: IQuestion): HTMLElement {
    const card = h('div', {
      class: 'iterion-card pending',
      'data-interaction': q.id,
      'data-kind': q.kind
    });
    for (const text of q.questions) {
      card.append(h('div', { class: 'iterion-question' }, text));
    }
    card.append(h('div', { class: 'iterion-run-state', role: 'note', hidden: true }));
    card.append(
      h(
        'div',
        { class: 'iterion-meta' },
        'asked ',
        when(q.requested_at),
        h('span', { class: 'iterion-waits' }),
        q.expires_at ? ' · ' : null,
        q.expires_at ? until(q.expires_at) : null,
        q.revision ? ' · ' : null,
        q.revision ? h('span', { class: 'iterion-reworded' }, 'reworded by its agent') : null
      )
    );
    const controls = h('div', { class: 'iterion-controls' });
    const send = (answer: unknown): void => void this._send(q, answer, card);
    for (const option of q.options) {
      controls.append(
        h(
          'button',
          {
            type: 'button',
            class: 'iterion-option',
            'data-option': option.id,
            title: option.label ? `answer ${option.id}` : null,
            onclick: () => send(option.id)
          },
          option.label || option.id
        )
      );
    }
    if (q.allow_free_text || !q.options.length) {
      const input = h('input', {
        type: 'text',
        class: 'iterion-free-text',
        placeholder: 'Your answer',
        'aria-label': `Your answer to: ${q.question}`
      }) as HTMLInputElement;
      const submit = (): void => {
        if (input.value.trim()) {
          send(input.value);
        }
      };
      input.addEventListener('keydown', e => {
        if (e.key === 'Enter') {
          submit();
        }
      });
      controls.append(
        input,
        h(
          'button',
          { type: 'button', class: 'iterion-submit iterion-primary', onclick: submit },
          'Answer'
        )
      );
    }
    card.append(controls);
    drawRunState(card, q);
    return card;
  }

  private async _send(q: IQuestion, answer: unknown, card: HTMLElement): Promise<void> {
    const controls = Array.from(card.querySelectorAll<HTMLButtonElement>('button, input'));
    controls.forEach(c => (c.disabled = true));
    try {
      const outcome = outcomeText(await this.api.answer(q, answer, this.who()), q);
      this._say(outcome.parts, outcome.saved ? 'saved' : 'sent', q, outcome.stalled === true);
    } catch (err) {
      const message = err instanceof ApiError ? err.message : String(err);
      this._say([`Not answered: ${message}`], 'error', q);
      controls.forEach(c => (c.disabled = false));
    }
  }

  /**
   * Say what answering did. A plain confirmation goes after SENT_SHOWN_MS; what
   * asks for something (resume the run; an error) stays until dismissed, or
   * until the next answer says something else; "saved until the run is
   * resumed" also goes once the run is live again (a paused run that waits to
   * be resumed: once it is no longer paused).
   */
  private _say(
    parts: Parts,
    kind: 'sent' | 'saved' | 'error',
    q: IQuestion,
    stalled = false
  ): void {
    this._clear();
    const cls = kind === 'error' ? 'iterion-error' : kind === 'saved' ? 'iterion-ok iterion-saved' : 'iterion-ok';
    this._result.replaceChildren(
      h(
        'div',
        { class: `iterion-result ${cls}`, 'data-interaction': q.id, 'data-run': q.run_id },
        h('span', { class: 'iterion-result-text' }, ...parts),
        h(
          'button',
          {
            type: 'button',
            class: 'iterion-dismiss',
            title: 'Dismiss',
            'aria-label': 'Dismiss this message',
            onclick: () => this._clear()
          },
          '×'
        )
      )
    );
    this._shown = { saved: kind === 'saved', run: q.run_id, stalled };
    if (kind === 'sent') {
      this._resultTimer = window.setTimeout(() => this._clear(), SENT_SHOWN_MS);
    }
  }

  private _clear(): void {
    window.clearTimeout(this._resultTimer);
    this._shown = null;
    this._result.replaceChildren();
  }

  private _drawAnswered(answered: IQuestion[]): void {
    this._answered.replaceChildren(
      h('summary', {}, `Answered or closed (${answered.length})`),
      ...answered.map(q =>
        h(
          'div',
          {
            class: `iterion-card answered${q.ended ? ' iterion-ended' : ''}`,
            'data-interaction': q.id,
            'data-ended': q.ended || null
          },
          ...q.questions.map(text => h('div', { class: 'iterion-question' }, text)),
          h('div', { class: 'iterion-answer' }, '→ ', q.ended ? endText(q) : answerText(q)),
          h(
            'div',
            { class: 'iterion-meta' },
            q.ended ? `${origin(q)} · ` : `${origin(q)} · answered by ${q.answered_by || 'someone'} `,
            when(q.ended ? q.ended_at : q.answered_at)
          )
        )
      )
    );
  }

  private readonly _head: HTMLElement;
  private readonly _result: HTMLElement;
  private readonly _list: HTMLElement;
  private readonly _answered: HTMLElement;
  private readonly _timer: number;
  private _resultTimer = 0;
  private _shown: { saved: boolean; run: string; stalled: boolean } | null = null;
}

/**
 * Say on a pending question's card whether its run gets an answer now; drawn
 * in place when the run's status changes (the card keeps what is typed in it).
 */
function drawRunState(card: HTMLElement, q: IQuestion): void {
  const status = `${q.run_status ?? ''}#${waits(q)}#${q.run_cluster ? 'cluster' : ''}`;
  if (card.dataset.runStatus === status) {
    return;
  }
  card.dataset.runStatus = status;
  const state = card.querySelector<HTMLElement>('.iterion-run-state');
  const waiting = card.querySelector<HTMLElement>('.iterion-waits');
  const parts = runState(q);
  state?.replaceChildren(...(parts ?? []));
  if (state) {
    state.hidden = !parts;
  }
  if (waiting) {
    waiting.textContent = parts ? '' : ` · ${waits(q)}`;
  }
}

/** A pending question's key: an amended one (a new revision) is drawn again. */
function key(q: IQuestion): string {
  return `${q.id}#${q.revision || 0}`;
}

/** How a question ended unanswered, in words. */
function endText(q: IQuestion): string {
  if (q.ended === 'retracted') {
    return `withdrawn by its agent${q.end_reason ? `: ${q.end_reason}` : ''}`;
  }
  return 'expired unanswered';
}
