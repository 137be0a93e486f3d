// Diagnostics as you type: the server's compiler (POST /iterion/api/validate)
// checks a .iter file or the body of a %%iterion cell; each problem is
// underlined at its span, with its message on hover.

import { Extension, StateEffect, StateField, Text } from '@codemirror/state';
import {
  Decoration,
  DecorationSet,
  EditorView,
  hoverTooltip,
  ViewPlugin,
  ViewUpdate
} from '@codemirror/view';

import { Api, IDiagnostic } from './api';
import { CELL_MAGIC, ITER_MIME } from './language';

/** Milliseconds of quiet typing before the text is sent to the compiler. */
export const DEBOUNCE = 350;

export interface IMark {
  from: number;
  to: number;
  severity: 'error' | 'warning';
  code: string;
  message: string;
}

/** What to check in a document: its text and where that text starts, or null. */
export function checkable(doc: string, mime: string): { source: string; offset: number; name: string } | null {
  if (CELL_MAGIC.test(doc)) {
    const end = doc.indexOf('\n');
    if (end < 0 || !doc.slice(end + 1).trim()) {
      return null;
    }
    return { source: doc.slice(end + 1), offset: end + 1, name: 'cell' };
  }
  if (mime === ITER_MIME && doc.trim()) {
    return { source: doc, offset: 0, name: 'file.iter' };
  }
  return null;
}

/** The server's diagnostics as marks in a document of `length` characters (never empty ranges). */
export function marks(found: IDiagnostic[], offset: number, length: number): IMark[] {
  const out: IMark[] = [];
  for (const d of found) {
    let from = Math.min(offset + d.from, length);
    let to = Math.min(Math.max(offset + d.to, from), length);
    if (to <= from) {
      if (from < length) {
        to = from + 1;
      } else if (from > offset) {
        from = Math.max(offset, to - 1);
      } else {
        continue;
      }
    }
    out.push({ from, to, severity: d.severity, code: d.code, message: d.message });
  }
  return out;
}

const setMarks = StateEffect.define<IMark[]>();

const markField = StateField.define<{ deco: DecorationSet; items: IMark[] }>({
  create: () => ({ deco: Decoration.none, items: [] }),
  update(value, tr) {
    let { deco, items } = value;
    if (tr.docChanged) {
      deco = deco.map(tr.changes);
      items = items.map(i => ({ ...i, from: tr.changes.mapPos(i.from), to: tr.changes.mapPos(i.to) }));
    }
    for (const effect of tr.effects) {
      if (effect.is(setMarks)) {
        items = effect.value;
        deco = Decoration.set(
          items.map(i =>
            Decoration.mark({
              class: `cm-iterion-${i.severity}`,
              attributes: { 'data-code': i.code }
            }).range(i.from, i.to)
          ),
          true
        );
      }
    }
    return { deco, items };
  },
  provide: field => EditorView.decorations.from(field, value => value.deco)
});

const hover = hoverTooltip((view, pos) => {
  const here = view.state.field(markField).items.filter(i => pos >= i.from && pos <= i.to);
  if (!here.length) {
    return null;
  }
  return {
    pos: Math.min(...here.map(i => i.from)),
    end: Math.max(...here.map(i => i.to)),
    above: true,
    create() {
      const dom = document.createElement('div');
      dom.className = 'cm-iterion-tooltip';
      for (const i of here) {
        const row = document.createElement('div');
        row.className = `cm-iterion-tooltip-${i.severity}`;
        const code = document.createElement('b');
        code.textContent = `${i.code} ${i.severity}: `;
        row.append(code, document.createTextNode(i.message));
        dom.append(row);
      }
      return { dom };
    }
  };
});

/** The editor extension: `mime()` says what the document is (a cell's changes with its first line). */
export function iterDiagnostics(api: Api, mime: () => string): Extension {
  const checker = ViewPlugin.fromClass(
    class {
      constructor(readonly view: EditorView) {
        this.schedule();
      }
      update(update: ViewUpdate): void {
        if (update.docChanged) {
          this.schedule();
        }
      }
      schedule(): void {
        window.clearTimeout(this.timer);
        this.timer = window.setTimeout(() => void this.check(), DEBOUNCE);
      }
      async check(): Promise<void> {
        const doc: Text = this.view.state.doc;
        const text = doc.toString();
        const what = checkable(text, mime());
        this.abort?.abort();
        if (!what) {
          if (this.view.state.field(markField).items.length) {
            this.view.dispatch({ effects: setMarks.of([]) });
          }
          return;
        }
        const abort = (this.abort = new AbortController());
        try {
          const found = await api.validate(what.source, what.name, abort.signal);
          if (abort.signal.aborted || this.view.state.doc !== doc) {
            return; // the text changed meanwhile: a newer check is on its way
          }
          this.view.dispatch({ effects: setMarks.of(marks(found, what.offset, doc.length)) });
        } catch {
          // the server is unreachable or refused: keep what was shown
        }
      }
      destroy(): void {
        window.clearTimeout(this.timer);
        this.abort?.abort();
      }
      timer = 0;
      abort: AbortController | null = null;
    }
  );
  return [markField, checker, hover, diagnosticsTheme];
}

const diagnosticsTheme = EditorView.baseTheme({
  '.cm-iterion-error': {
    textDecoration: 'underline wavy var(--jp-error-color1)',
    textDecorationSkipInk: 'none',
    textUnderlineOffset: '3px'
  },
  '.cm-iterion-warning': {
    textDecoration: 'underline wavy var(--jp-warn-color1)',
    textDecorationSkipInk: 'none',
    textUnderlineOffset: '3px'
  },
  '.cm-tooltip.cm-tooltip-hover:has(.cm-iterion-tooltip)': {
    backgroundColor: 'var(--jp-layout-color1)',
    color: 'var(--jp-ui-font-color0)',
    border: '1px solid var(--jp-border-color1)'
  },
  '.cm-iterion-tooltip': {
    maxWidth: '40em',
    padding: '4px 8px',
    fontFamily: 'var(--jp-ui-font-family)',
    fontSize: 'var(--jp-ui-font-size1)',
    whiteSpace: 'pre-wrap'
  },
  '.cm-iterion-tooltip-error': { borderLeft: '3px solid var(--jp-error-color1)', paddingLeft: '6px' },
  '.cm-iterion-tooltip-warning': { borderLeft: '3px solid var(--jp-warn-color1)', paddingLeft: '6px' }
});
