/**
 * A log panel in the main area: `LogPanel` plus its toolbar (follow, search, copy, download,
 * cancel). The toolbar's buttons are native `<button>`s with names (JupyterLab's `jp-button`
 * host carries `aria-pressed` without a role, which axe reports as `aria-allowed-attr`).
 */
import { Clipboard, MainAreaWidget, Notification } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import {
  LabIcon,
  copyIcon,
  downloadIcon,
  stopIcon
} from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { computeIcon } from '../icons';
import { LogPanel } from './panel';

/** A toolbar button: a native `<button>` with a name, an optional icon, label and pressed state. */
class ToolButton extends Widget {
  constructor(options: {
    name: string;
    tooltip: string;
    onClick: () => void;
    icon?: LabIcon;
    label?: string;
    pressed?: boolean;
    enabled?: boolean;
  }) {
    super({ node: document.createElement('div') });
    this.addClass('j2c-ToolButton');
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'j2c-ToolButton-button';
    button.setAttribute('aria-label', options.name);
    button.title = options.tooltip;
    if (options.icon) {
      button.appendChild(
        options.icon.element({ tag: 'span', className: 'j2c-ToolButton-icon' })
      );
    }
    if (options.label) {
      const label = document.createElement('span');
      label.className = 'j2c-ToolButton-label';
      label.textContent = options.label;
      button.appendChild(label);
    }
    button.addEventListener('click', () => options.onClick());
    this._button = button;
    this.node.appendChild(button);
    if (options.pressed !== undefined) {
      this.pressed = options.pressed;
    }
    this.enabled = options.enabled ?? true;
  }

  get button(): HTMLButtonElement {
    return this._button;
  }

  set pressed(pressed: boolean) {
    this._button.setAttribute('aria-pressed', String(pressed));
    this._button.classList.toggle('j2c-mod-pressed', pressed);
  }

  set enabled(enabled: boolean) {
    this._button.disabled = !enabled;
  }

  private readonly _button: HTMLButtonElement;
}

/** A search field: Enter finds the next match, Shift+Enter the previous one. */
class SearchField extends Widget {
  constructor(panel: LogPanel, trans: TranslationBundle) {
    super({ node: document.createElement('div') });
    this.addClass('j2c-LogSearch');
    const input = document.createElement('input');
    input.type = 'search';
    input.className = 'jp-mod-styled';
    input.placeholder = trans.__('Search the log');
    input.setAttribute('aria-label', trans.__('Search the log'));
    input.addEventListener('keydown', event => {
      if (event.key === 'Enter') {
        event.preventDefault();
        const found = panel.view.find(input.value, event.shiftKey);
        input.classList.toggle('j2c-mod-notFound', !found && !!input.value);
      } else if (event.key === 'Escape') {
        input.value = '';
        panel.view.find('');
      }
    });
    this.node.appendChild(input);
  }
}

/**
 * "All ranks / rank k": which rank's lines the view shows. Hidden until a multi-node job's
 * first ranked line; gains an option per rank as they appear.
 */
class RankFilter extends Widget {
  constructor(panel: LogPanel, trans: TranslationBundle) {
    super({ node: document.createElement('div') });
    this.addClass('j2c-RankFilter');
    const select = document.createElement('select');
    select.className = 'jp-mod-styled';
    select.setAttribute('aria-label', trans.__('Ranks shown'));
    const render = (ranks: readonly number[]): void => {
      this.setHidden(ranks.length === 0);
      const wanted = [
        ['all', trans.__('All ranks')],
        ...ranks.map(rank => [String(rank), trans.__('Rank %1', rank)])
      ];
      if (select.options.length === wanted.length) {
        return;
      }
      const chosen = select.value || 'all';
      select.replaceChildren(
        ...wanted.map(([value, label]) => new Option(label, value))
      );
      select.value = chosen;
    };
    select.addEventListener('change', () => {
      panel.setRankFilter(select.value === 'all' ? null : Number(select.value));
    });
    panel.ranksChanged.connect((_, ranks) => render(ranks));
    this.node.appendChild(select);
    render(panel.ranks);
  }
}

function reportFailure(trans: TranslationBundle, what: string) {
  return (error: unknown): void => {
    Notification.error(
      trans.__(
        '%1 failed: %2',
        what,
        String((error as Error).message ?? error)
      ),
      {
        autoClose: 5000
      }
    );
  };
}

export function createLogWidget(
  panel: LogPanel,
  trans: TranslationBundle
): MainAreaWidget<LogPanel> {
  const widget = new MainAreaWidget({ content: panel });
  widget.id = `j2c-log-${panel.jobId}`;
  widget.title.icon = computeIcon;
  widget.addClass('j2c-LogWidget');

  const follow = new ToolButton({
    name: trans.__('Follow'),
    label: trans.__('Follow'),
    tooltip: trans.__('Keep the newest line in sight (click again to pause)'),
    pressed: panel.view.following,
    onClick: () => panel.view.setFollowing(!panel.view.following)
  });
  follow.addClass('j2c-FollowButton');
  panel.view.followingChanged.connect((_, following) => {
    follow.pressed = following;
  });

  const cancel = new ToolButton({
    icon: stopIcon,
    name: trans.__('Cancel'),
    label: trans.__('Cancel'),
    tooltip: trans.__('Cancel this job'),
    enabled: !panel.progress.ended,
    onClick: () => {
      cancel.enabled = false;
      panel.cancel().catch(reportFailure(trans, trans.__('Cancel')));
    }
  });
  cancel.addClass('j2c-CancelButton');
  panel.ended.connect(() => {
    cancel.enabled = false;
  });

  const toolbar = widget.toolbar;
  toolbar.node.setAttribute('aria-label', trans.__('Log actions'));
  toolbar.addItem('follow', follow);
  toolbar.addItem('search', new SearchField(panel, trans));
  toolbar.addItem('ranks', new RankFilter(panel, trans));
  toolbar.addItem(
    'copy',
    new ToolButton({
      icon: copyIcon,
      name: trans.__('Copy'),
      tooltip: trans.__('Copy the selection, or the whole view'),
      onClick: () => Clipboard.copyToSystem(panel.view.text())
    })
  );
  toolbar.addItem(
    'download',
    new ToolButton({
      icon: downloadIcon,
      name: trans.__('Download'),
      tooltip: trans.__('Download the whole log'),
      onClick: () => {
        panel.download().catch(reportFailure(trans, trans.__('Download')));
      }
    })
  );
  toolbar.addItem(
    'spacer',
    new Widget({ node: document.createElement('span') })
  );
  toolbar.addItem('cancel', cancel);
  return widget;
}
