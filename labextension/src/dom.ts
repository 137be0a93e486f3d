// Small DOM helpers. Every piece of agent- or person-written text goes through
// text nodes: never HTML.

type Child = Node | string | null | undefined | false;

export function h(
  tag: string,
  attrs: Record<string, string | boolean | null | undefined | ((e: Event) => void)> = {},
  ...children: (Child | Child[])[]
): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) {
      continue;
    }
    if (typeof value === 'function') {
      node.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      node.className = String(value);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

export function exact(iso: string | null | undefined): string {
  if (!iso) {
    return '';
  }
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? iso : at.toLocaleString();
}

/** A time as people say it: "just now", "2 min ago", "yesterday". */
export function ago(iso: string | null | undefined, now: number = Date.now()): string {
  if (!iso) {
    return '';
  }
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) {
    return iso;
  }
  const secs = Math.max(0, (now - at.getTime()) / 1000);
  if (secs < 45) {
    return 'just now';
  }
  if (secs < 90) {
    return '1 min ago';
  }
  if (secs < 3600) {
    return `${Math.round(secs / 60)} min ago`;
  }
  if (secs < 5400) {
    return '1 h ago';
  }
  if (secs < 86400) {
    return `${Math.round(secs / 3600)} h ago`;
  }
  if (secs < 172800) {
    return 'yesterday';
  }
  return at.toLocaleDateString();
}

/** A <time> saying how long ago, the exact time on hover; refreshed by refreshTimes. */
export function when(iso: string | null | undefined): HTMLElement {
  return h('time', { datetime: iso || '', title: exact(iso), class: 'iterion-ago' }, ago(iso));
}

export function refreshTimes(root: HTMLElement): void {
  for (const node of Array.from(root.querySelectorAll('time.iterion-ago'))) {
    node.textContent = ago(node.getAttribute('datetime'));
  }
  for (const node of Array.from(root.querySelectorAll('time.iterion-left'))) {
    node.textContent = left(node.getAttribute('datetime'));
  }
}

/** The time left before an expiry, as people say it ("expires in 4 min"). */
export function left(iso: string | null | undefined, now: number = Date.now()): string {
  const at = new Date(iso || '');
  if (Number.isNaN(at.getTime())) {
    return '';
  }
  const secs = (at.getTime() - now) / 1000;
  if (secs <= 0) {
    return 'expiring now';
  }
  if (secs < 60) {
    return `expires in ${Math.ceil(secs)} s`;
  }
  if (secs < 3600) {
    return `expires in ${Math.round(secs / 60)} min`;
  }
  if (secs < 172800) {
    return `expires in ${Math.round(secs / 3600)} h`;
  }
  return `expires in ${Math.round(secs / 86400)} days`;
}

/** A <time> saying how long is left before an expiry; refreshed by refreshTimes. */
export function until(iso: string): HTMLElement {
  return h('time', { datetime: iso, title: exact(iso), class: 'iterion-left' }, left(iso));
}

export function show(value: unknown): string {
  if (value === null || value === undefined) {
    return '';
  }
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

export function shorten(text: string, limit: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > limit ? `${flat.slice(0, limit - 1)}…` : flat;
}

/**
 * Put `items` in `list` as cards, keyed, drawing only new ones: a card being
 * typed into keeps its text box and its focus.
 */
export function syncChildren<T>(
  list: HTMLElement,
  items: T[],
  key: (item: T) => string,
  make: (item: T) => HTMLElement,
  update?: (card: HTMLElement, item: T) => void
): void {
  const existing = new Map<string, HTMLElement>();
  for (const child of Array.from(list.children) as HTMLElement[]) {
    if (child.dataset.key) {
      existing.set(child.dataset.key, child);
    }
  }
  const wanted = items.map(item => {
    const k = key(item);
    let card = existing.get(k);
    if (!card) {
      card = make(item);
      card.dataset.key = k;
    } else if (update) {
      update(card, item);
    }
    return card;
  });
  // Remove and insert only what changed: a card that stays is never taken out of
  // the page, so the text box someone is typing into keeps its text and its focus.
  const keep = new Set(wanted);
  for (const child of Array.from(list.children)) {
    if (!keep.has(child as HTMLElement)) {
      child.remove();
    }
  }
  wanted.forEach((card, i) => {
    const here = list.children[i] ?? null;
    if (here !== card) {
      list.insertBefore(card, here);
    }
  });
}
