// The .iter language for CodeMirror 6: a stream tokenizer (highlighting only;
// the real compiler checks the text on the server, see diagnostics.ts).

import { LanguageSupport, StreamLanguage, StringStream } from '@codemirror/language';

export const ITER_MIME = 'text/x-iterion';
export const CELL_MAGIC = /^%%iterion(\s|$)/;

const DECLARATIONS = new Set([
  'vars', 'prompt', 'schema', 'agent', 'judge', 'router', 'human', 'tool', 'compute', 'emit',
  'wait', 'await_answers', 'workflow', 'fail', 'presets', 'mcp_server', 'attachments', 'cursor'
]); // prettier-ignore
const KEYWORDS = new Set(['when', 'not', 'else', 'as', 'with', 'and', 'or', 'dsl']);
const ATOMS = new Set(['done', 'fail']);
const BOOLS = new Set(['true', 'false', 'null']);
const TYPES = new Set(['string', 'int', 'float', 'bool', 'json']);

export interface IIterState {
  /** Indentation of the `prompt NAME:` header whose text block we are in, or -1. */
  rawIndent: number;
  /** This line is inside a prompt's text block. */
  raw: boolean;
  /** The next name is the one a declaration introduces. */
  naming: boolean;
  /** This line declares a prompt: its text block starts on the next line. */
  promptHeader: boolean;
  lineIndent: number;
  /** The indentation of the prompt header seen on this line. */
  rawIndentNext: number;
}

function startOfLine(stream: StringStream, state: IIterState): void {
  const indent = stream.indentation();
  state.lineIndent = indent;
  state.naming = false;
  if (state.promptHeader) {
    state.rawIndent = state.rawIndentNext;
    state.promptHeader = false;
  }
  state.raw = state.rawIndent >= 0 && indent > state.rawIndent;
  if (!state.raw) {
    state.rawIndent = -1;
  }
}

function rawText(stream: StringStream): string | null {
  if (stream.match(/^\{\{[^}]*\}\}/) || stream.match(/^\$\{[^}]*\}/)) {
    return 'variableName.special';
  }
  if (!stream.match(/^(?:[^{$]|\{(?!\{)|\$(?!\{))+/)) {
    stream.next();
  }
  return 'content';
}

function word(stream: StringStream, state: IIterState, text: string): string {
  const atStart = stream.start === state.lineIndent;
  if (atStart && state.lineIndent === 0 && DECLARATIONS.has(text)) {
    state.naming = text !== 'vars';
    if (text === 'prompt') {
      state.promptHeader = true;
      state.rawIndentNext = state.lineIndent;
    }
    return 'keyword';
  }
  if (state.naming) {
    state.naming = false;
    return 'variableName.definition';
  }
  if (atStart && stream.match(/^\s*:/, false)) {
    return 'propertyName';
  }
  if (KEYWORDS.has(text)) {
    return 'keyword';
  }
  if (ATOMS.has(text)) {
    return 'atom';
  }
  if (BOOLS.has(text)) {
    return 'bool';
  }
  if (TYPES.has(text)) {
    return 'typeName';
  }
  return 'variableName';
}

export const iterStream = StreamLanguage.define<IIterState>({
  name: 'iter',
  startState: () => ({
    rawIndent: -1,
    raw: false,
    naming: false,
    promptHeader: false,
    lineIndent: 0,
    rawIndentNext: -1
  }),
  token(stream, state) {
    if (stream.sol()) {
      startOfLine(stream, state);
      if (stream.match(CELL_MAGIC, false)) {
        stream.skipToEnd();
        return 'meta';
      }
    }
    if (state.raw) {
      return rawText(stream);
    }
    if (stream.eatSpace()) {
      return null;
    }
    if (stream.match('##')) {
      stream.skipToEnd();
      return 'comment';
    }
    if (stream.match('->')) {
      return 'operator';
    }
    if (stream.match(/^"(?:[^"\\]|\\.)*"?/) || stream.match(/^`[^`]*`?/)) {
      return 'string';
    }
    if (stream.match(/^-?[0-9]+(?:\.[0-9]+)?[A-Za-z0-9_]*/)) {
      return 'number';
    }
    // a dotted name too: tools: [mcp.words.shout], mcp.words.*
    const ident = stream.match(/^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\.\*)?/);
    if (ident) {
      return word(stream, state, (ident as RegExpMatchArray)[0]);
    }
    if (stream.match(/^\|\s*(?:##.*)?$/)) {
      // `key: |`: the lines indented under it are a block of text, as a prompt's
      state.promptHeader = true;
      state.rawIndentNext = state.lineIndent;
      return 'punctuation';
    }
    if (stream.match(/^[:,=[\]{}()]/)) {
      return 'punctuation';
    }
    stream.next();
    return 'invalid';
  },
  blankLine(state) {
    if (state.promptHeader) {
      state.rawIndent = state.rawIndentNext;
      state.promptHeader = false;
    }
  },
  languageData: { commentTokens: { line: '##' } }
});

export function iterLanguage(): LanguageSupport {
  return new LanguageSupport(iterStream);
}
