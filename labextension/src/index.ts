// iterion_nb in JupyterLab: the questions sidebar (live, pushed by the server
// extension), notifications for new questions, the runs panel, and the .iter
// language in the editor (highlighting, and the compiler's diagnostics as you type).

import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, IFrame, MainAreaWidget, Notification } from '@jupyterlab/apputils';
import {
  EditorExtensionRegistry,
  IEditorExtensionRegistry,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon, listIcon, refreshIcon, ToolbarButton } from '@jupyterlab/ui-components';

import { Api, ApiError, IQuestion, IRun, ISnapshot } from './api';
import { iterDiagnostics } from './diagnostics';
import { shorten } from './dom';
import { InboxFeed } from './feed';
import { InboxPanel, INBOX_ID, origin } from './inbox';
import { CELL_MAGIC, ITER_MIME, iterLanguage } from './language';
import { RunsPanel } from './runs';

const INBOX_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<path class="jp-icon3" fill="#616161" d="M4 3h16a2 2 0 0 1 2 2v11a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2zm7.1 10.6v1.9h1.9v-1.9h-1.9zM12 5.6c-1.9 0-3.3 1.2-3.4 3h1.9c.1-.8.7-1.3 1.5-1.3.9 0 1.5.5 1.5 1.2 0 .6-.3.9-1.1 1.4-.9.5-1.3 1.1-1.3 2.1v.4h1.9V12c0-.6.2-.9 1-1.4.9-.5 1.5-1.2 1.5-2.3 0-1.6-1.4-2.7-3.5-2.7z"/>
</svg>`;
const WORKFLOW_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<path class="jp-icon3" fill="#616161" d="M3 3h7v5H3zm11 0h7v5h-7zM8.5 16h7v5h-7zM6 8h1.5v3.2h9V8H18v4.7h-5.25V16h-1.5v-3.3H6z"/>
</svg>`;

export const inboxIcon = new LabIcon({ name: 'iterion:inbox', svgstr: INBOX_SVG });

/** The number of pending questions the sidebar's tab shows. */
let badgeCount = 0;

/**
 * The sidebar tab's icon: the inbox icon and, over it, the pending count as an
 * element of its own. (Not a `::after` of the tab: JupyterLab draws the current
 * tab's border with that one.) Lumino renders it again whenever the tab's
 * title changes, as it does when the count does.
 */
const inboxTabIcon = new LabIcon({
  name: 'iterion:inbox-tab',
  svgstr: INBOX_SVG,
  render: (host, options) => {
    inboxIcon.render(host, options);
    let badge = host.querySelector<HTMLElement>(':scope > .iterion-badge');
    if (!badgeCount) {
      badge?.remove();
      return;
    }
    if (!badge) {
      badge = document.createElement('span');
      badge.className = 'iterion-badge';
      badge.setAttribute('aria-hidden', 'true'); // the tab's caption says it in words
      host.append(badge);
    }
    badge.textContent = badgeCount > 99 ? '99+' : String(badgeCount);
  }
});
export const workflowIcon = new LabIcon({ name: 'iterion:workflow', svgstr: WORKFLOW_SVG });

const CATEGORY = 'iterion';
export const COMMANDS = {
  openInbox: 'iterion:open-inbox',
  openRuns: 'iterion:open-runs',
  openReport: 'iterion:open-report'
};

/** Whoever answers from this browser: the Jupyter user's name. */
function userName(app: JupyterFrontEnd): string {
  const identity = app.serviceManager.user?.identity;
  return identity?.display_name || identity?.name || identity?.username || 'jupyterlab';
}

/** A notification per new question; each leaves when its question is no longer pending. */
class Notifier {
  constructor(private readonly app: JupyterFrontEnd) {}

  update(snap: ISnapshot): void {
    const pending = new Map(snap.pending.map(q => [q.id, q]));
    for (const [id, toast] of this._shown) {
      if (!pending.has(id)) {
        Notification.dismiss(toast);
        this._shown.delete(id);
      }
    }
    const fresh = snap.pending.filter(q => !this._seen.has(q.id));
    fresh.forEach(q => this._seen.add(q.id));
    if (!this._started) {
      this._started = true;
      if (fresh.length) {
        this._summary(fresh);
      }
      return;
    }
    if (fresh.length > 3) {
      this._summary(fresh);
      return;
    }
    for (const q of fresh) {
      this._shown.set(q.id, this._one(q));
    }
  }

  private _one(q: IQuestion): string {
    const asks = q.kind === 'async' ? 'asks' : 'waits for an answer';
    return Notification.info(`${origin(q)} ${asks}: ${shorten(q.question, 160)}`, {
      autoClose: false,
      actions: [
        {
          label: 'Answer',
          caption: 'open the questions sidebar at this question',
          displayType: 'accent',
          callback: () => {
            void this.app.commands.execute(COMMANDS.openInbox, { interaction: q.id });
          }
        }
      ]
    });
  }

  private _summary(fresh: IQuestion[]): void {
    const n = fresh.length;
    Notification.info(`${n} question${n > 1 ? 's are' : ' is'} waiting for an answer`, {
      autoClose: 10000,
      actions: [
        {
          label: 'Show',
          displayType: 'accent',
          callback: () => {
            void this.app.commands.execute(COMMANDS.openInbox, { interaction: fresh[0].id });
          }
        }
      ]
    });
  }

  private _seen = new Set<string>();
  private _shown = new Map<string, string>();
  private _started = false;
}

function openReport(app: JupyterFrontEnd, api: Api, runId: string, tracker: Map<string, MainAreaWidget>): void {
  const open = tracker.get(runId);
  if (open && !open.isDisposed) {
    app.shell.activateById(open.id);
    return;
  }
  const frame = new IFrame({ sandbox: [], referrerPolicy: 'no-referrer' });
  frame.url = api.reportUrl(runId);
  frame.addClass('iterion-report-frame');
  const widget = new MainAreaWidget({ content: frame });
  widget.id = `iterion-report-${runId}`;
  widget.title.label = `Report ${runId}`;
  widget.title.caption = `iterion: the report of run ${runId}`;
  widget.title.icon = workflowIcon;
  widget.title.closable = true;
  widget.toolbar.addItem(
    'refresh',
    new ToolbarButton({
      icon: refreshIcon,
      tooltip: 'Reload the report (a live run: its state now)',
      onClick: () => {
        frame.url = `${api.reportUrl(runId)}?t=${Date.now()}`;
      }
    })
  );
  tracker.set(runId, widget);
  app.shell.add(widget, 'main');
  app.shell.activateById(widget.id);
}

const sidebar: JupyterFrontEndPlugin<void> = {
  id: '@iterion-nb/labextension:sidebar',
  description: 'The questions sidebar, notifications and the runs panel.',
  autoStart: true,
  optional: [ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const api = new Api();
    const feed = new InboxFeed(api);
    const inbox = new InboxPanel(feed, api, () => userName(app));
    inbox.title.icon = inboxTabIcon;
    const reports = new Map<string, MainAreaWidget>();
    const runs = new RunsPanel(feed, {
      report: (run: IRun) => openReport(app, api, run.id, reports),
      questions: (run: IRun) => {
        const first = feed.snapshot?.pending.find(q => q.run_id === run.id);
        void app.commands.execute(COMMANDS.openInbox, { interaction: first?.id ?? '' });
      },
      cancel: async (run: IRun) => {
        try {
          const { status } = await api.cancel(run.id);
          Notification.info(`Run ${run.id}: ${status === 'running' ? 'asked to stop' : status}`, {
            autoClose: 5000
          });
        } catch (err) {
          Notification.error(`Run ${run.id} not cancelled: ${err instanceof ApiError ? err.message : err}`, {
            autoClose: 8000
          });
        }
      },
      resume: (run: IRun) => {
        const line = `%iterion resume ${run.id}`;
        void navigator.clipboard?.writeText(line).catch(() => undefined);
        Notification.info(
          `The Jupyter server runs no workflows: resume run ${run.id} in a notebook with \`${line}\` ` +
            `(copied), or in a terminal with \`iterion-nb resume ${run.id}\`.`,
          { autoClose: 15000 }
        );
      }
    });
    runs.title.icon = listIcon;
    app.shell.add(inbox, 'left', { rank: 650, type: 'iterion questions' });
    app.shell.add(runs, 'left', { rank: 651, type: 'iterion runs' });
    restorer?.add(inbox, INBOX_ID);
    restorer?.add(runs, runs.id);

    const notifier = new Notifier(app);
    feed.changed.connect((_, snap) => {
      const count = snap?.pending.length ?? 0;
      badgeCount = count; // drawn as the title changes below
      const { ['iterion-count']: _old, ...others } = inbox.title.dataset;
      inbox.title.dataset = count ? { ...others, 'iterion-count': String(count) } : others;
      inbox.title.caption = count
        ? `iterion: ${count} question${count > 1 ? 's' : ''} waiting for you`
        : 'iterion: no question waiting';
      if (snap) {
        notifier.update(snap);
      }
    });
    feed.start();

    app.commands.addCommand(COMMANDS.openInbox, {
      label: 'Show the questions waiting for you (iterion)',
      caption: 'every pending question of the runs in the server store',
      icon: inboxIcon,
      execute: args => {
        app.shell.activateById(inbox.id);
        const target = typeof args.interaction === 'string' ? args.interaction : undefined;
        requestAnimationFrame(() => inbox.focusQuestion(target || undefined));
      }
    });
    app.commands.addCommand(COMMANDS.openRuns, {
      label: 'Show the runs (iterion)',
      icon: listIcon,
      execute: () => app.shell.activateById(runs.id)
    });
    app.commands.addCommand(COMMANDS.openReport, {
      label: args => (args.run ? `Open the report of run ${args.run}` : 'Open a run report'),
      icon: workflowIcon,
      execute: args => {
        if (typeof args.run === 'string' && args.run) {
          openReport(app, api, args.run, reports);
        }
      }
    });
    palette?.addItem({ command: COMMANDS.openInbox, category: CATEGORY });
    palette?.addItem({ command: COMMANDS.openRuns, category: CATEGORY });
  }
};

/** Give `%%iterion` cells the .iter language, and the kernel's language back when it goes. */
function followMagicCells(panel: NotebookPanel): void {
  const notebook = panel.content;
  const watched = new WeakSet<object>();
  const sync = (model: { mimeType: string; sharedModel: { getSource(): string } }): void => {
    const magic = CELL_MAGIC.test(model.sharedModel.getSource());
    if (magic && model.mimeType !== ITER_MIME) {
      model.mimeType = ITER_MIME;
    } else if (!magic && model.mimeType === ITER_MIME) {
      model.mimeType = notebook.codeMimetype;
    }
  };
  const watchAll = (): void => {
    for (const cell of notebook.widgets) {
      const model = cell.model;
      if (model.type !== 'code' || watched.has(model)) {
        continue;
      }
      watched.add(model);
      model.contentChanged.connect(() => sync(model));
      model.mimeTypeChanged.connect(() => sync(model));
      sync(model);
    }
  };
  const follow = (): void => {
    watchAll();
    notebook.model?.cells.changed.connect(() => void Promise.resolve().then(watchAll));
  };
  notebook.modelChanged.connect(follow);
  void panel.context.ready.then(follow);
  follow();
}

const language: JupyterFrontEndPlugin<void> = {
  id: '@iterion-nb/labextension:language',
  description: 'The .iter language: highlighting and the compiler diagnostics as you type.',
  autoStart: true,
  requires: [IEditorLanguageRegistry, IEditorExtensionRegistry],
  optional: [INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    languages: IEditorLanguageRegistry,
    extensions: IEditorExtensionRegistry,
    notebooks: INotebookTracker | null
  ) => {
    languages.addLanguage({
      name: 'iter',
      displayName: 'iterion workflow',
      mime: ITER_MIME,
      extensions: ['iter', 'bot'],
      load: async () => iterLanguage()
    });
    app.docRegistry.addFileType({
      name: 'iterion',
      displayName: 'iterion workflow',
      extensions: ['.iter', '.bot'],
      mimeTypes: [ITER_MIME],
      icon: workflowIcon,
      fileFormat: 'text',
      contentType: 'file'
    });
    const api = new Api();
    extensions.addExtension({
      name: 'iterion:diagnostics',
      factory: options =>
        EditorExtensionRegistry.createImmutableExtension(
          iterDiagnostics(api, () => options.model.mimeType)
        )
    });
    notebooks?.widgetAdded.connect((_, panel) => followMagicCells(panel));
    notebooks?.forEach(followMagicCells);
  }
};

export default [sidebar, language];
