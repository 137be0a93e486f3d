// The server extension's routes, through Jupyter's ServerConnection (its auth and XSRF).

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export interface IOption {
  id: string;
  label: string;
}

export interface IQuestion {
  id: string;
  run_id: string;
  node_id: string;
  branch_id: string | null;
  kind: 'human' | 'ask_user' | 'async' | 'await';
  question: string;
  questions: string[];
  options: IOption[];
  allow_free_text: boolean;
  requested_at: string | null;
  answered_at: string | null;
  answers: unknown;
  answered_by: string | null;
  workflow: string | null;
  /** Its run's status (effective: `interrupted` when nothing executes the run). */
  run_status?: string | null;
  /** A Dask cluster executes its run: its workers take it up again by themselves. */
  run_cluster?: boolean;
  expires_at: string | null;
  /** How it ended unanswered: expired, or withdrawn by its agent (retracted). */
  ended?: 'expired' | 'retracted' | null;
  ended_at?: string | null;
  end_reason?: string | null;
  /** How many times its agent reworded it. */
  revision?: number;
  /** Its run is paused at a sync point (`await_answers`) until it is answered. */
  waited_on?: boolean;
  /** The node visit that asked it (an async question) has finished. */
  asker_finished?: boolean;
}

export interface IRun {
  id: string;
  workflow: string;
  status: string;
  created_at: string;
  updated_at: string;
  error: string | null;
  owner: { pid: number; host: string; since: string; expires_at: string } | null;
}

export interface ISnapshot {
  pending: IQuestion[];
  answered: IQuestion[];
  runs: IRun[];
}

export interface IAnswerOutcome {
  queued: boolean;
  resumed: boolean;
  /** The run's status once the answer is in. */
  run_status?: string;
  /** Paused with every answer in, and nothing executes it: someone must resume it. */
  resume_needed?: boolean;
  /** A Dask cluster's run no worker took up yet (paused with every answer in, or interrupted). */
  awaiting_worker?: boolean;
  /** Why the answering process could not send the run to its cluster itself. */
  resume_error?: string;
}

export interface IDiagnostic {
  code: string;
  severity: 'error' | 'warning';
  message: string;
  line: number;
  column: number;
  end_line: number;
  end_column: number;
  from: number;
  to: number;
}

/** An error answer of the API: its status, code and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: Record<string, unknown> = {}
  ) {
    super(message);
  }
}

export class Api {
  readonly settings = ServerConnection.makeSettings();

  url(...parts: string[]): string {
    return URLExt.join(this.settings.baseUrl, 'iterion', 'api', ...parts.map(encodeURIComponent));
  }

  async request<T>(parts: string[], init: RequestInit = {}): Promise<T> {
    const response = await ServerConnection.makeRequest(this.url(...parts), init, this.settings);
    const text = await response.text();
    let body: Record<string, unknown> = {};
    try {
      body = text ? JSON.parse(text) : {};
    } catch {
      body = { message: text };
    }
    if (!response.ok) {
      throw new ApiError(
        response.status,
        String(body.code ?? 'http_error'),
        String(body.message ?? response.statusText),
        body
      );
    }
    return body as T;
  }

  post<T>(parts: string[], payload: unknown): Promise<T> {
    return this.request<T>(parts, { method: 'POST', body: JSON.stringify(payload) });
  }

  answer(q: IQuestion, answer: unknown, by: string): Promise<IAnswerOutcome> {
    return this.post(['runs', q.run_id, 'interactions', q.id, 'answer'], {
      answer,
      answered_by: by
    });
  }

  cancel(runId: string): Promise<{ status: string }> {
    return this.post(['runs', runId, 'cancel'], {});
  }

  async validate(source: string, name: string, signal?: AbortSignal): Promise<IDiagnostic[]> {
    const found = await this.request<{ diagnostics: IDiagnostic[] }>(['validate'], {
      method: 'POST',
      body: JSON.stringify({ source, name }),
      signal
    });
    return found.diagnostics;
  }

  reportUrl(runId: string): string {
    return this.url('runs', runId, 'report');
  }

  /**
   * Read the pushed inbox (server-sent events) until `signal` aborts; each
   * snapshot goes to `onSnapshot`. Resolves when the stream ends.
   */
  async stream(
    onSnapshot: (snap: ISnapshot) => void,
    onProblem: (message: string) => void,
    signal: AbortSignal
  ): Promise<void> {
    const response = await ServerConnection.makeRequest(
      this.url('inbox', 'events'),
      { headers: { Accept: 'text/event-stream' }, cache: 'no-store', signal },
      this.settings
    );
    if (!response.ok || !response.body) {
      throw new ApiError(response.status, 'http_error', `the inbox stream answered ${response.status}`);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        return;
      }
      buffer += decoder.decode(value, { stream: true });
      let end = buffer.indexOf('\n\n');
      while (end >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        end = buffer.indexOf('\n\n');
        const event = parseEvent(block);
        if (event?.name === 'inbox') {
          onSnapshot(JSON.parse(event.data) as ISnapshot);
        } else if (event?.name === 'problem') {
          onProblem(String(JSON.parse(event.data).message));
        }
      }
    }
  }
}

/** One server-sent event block: its name and data (comments give null). */
export function parseEvent(block: string): { name: string; data: string } | null {
  let name = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) {
      name = line.slice(6).trim();
    } else if (line.startsWith('data:')) {
      data.push(line.slice(5).replace(/^ /, ''));
    }
  }
  return data.length ? { name, data: data.join('\n') } : null;
}
