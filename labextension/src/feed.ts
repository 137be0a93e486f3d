// The inbox as the server pushes it: the latest snapshot, kept live with reconnection.

import { ISignal, Signal } from '@lumino/signaling';

import { Api, ISnapshot } from './api';

export type FeedState = 'connecting' | 'live' | 'reconnecting';

export class InboxFeed {
  constructor(readonly api: Api) {}

  get snapshot(): ISnapshot | null {
    return this._snapshot;
  }

  get state(): FeedState {
    return this._state;
  }

  get problem(): string {
    return this._problem;
  }

  /** A new snapshot (or a new connection state). */
  get changed(): ISignal<this, ISnapshot | null> {
    return this._changed;
  }

  start(): void {
    if (this._abort) {
      return;
    }
    this._abort = new AbortController();
    void this._run(this._abort.signal);
  }

  dispose(): void {
    this._abort?.abort();
    this._abort = null;
  }

  private async _run(signal: AbortSignal): Promise<void> {
    let delay = 500;
    while (!signal.aborted) {
      try {
        await this.api.stream(
          snap => {
            delay = 500;
            this._problem = '';
            this._set('live');
            this._snapshot = snap;
            this._changed.emit(snap);
          },
          message => {
            this._problem = message;
            this._changed.emit(this._snapshot);
          },
          signal
        );
      } catch (err) {
        if (signal.aborted) {
          return;
        }
        this._problem = err instanceof Error ? err.message : String(err);
      }
      this._set('reconnecting');
      await new Promise(resolve => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10000);
    }
  }

  private _set(state: FeedState): void {
    if (state !== this._state) {
      this._state = state;
      this._changed.emit(this._snapshot);
    }
  }

  private _snapshot: ISnapshot | null = null;
  private _state: FeedState = 'connecting';
  private _problem = '';
  private _abort: AbortController | null = null;
  private _changed = new Signal<this, ISnapshot | null>(this);
}
