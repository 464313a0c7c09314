/**
 * Reads the module specifiers a TypeScript file imports, without a compiler: a small lexer
 * skips comments, template text and regular expressions, then the tokens are matched against
 * the forms an import takes (`import ... from`, `import type ... from`, `import '...'`,
 * `export ... from`, `export type ... from`, `import('...')` in code or in a type). The layer
 * test (test/unit/layers.test.ts) checks what it finds against docs/architecture.md's matrix.
 */

export type ImportKind = 'static' | 'type' | 'side-effect' | 're-export' | 'dynamic';

export interface FoundImport {
  specifier: string;
  kind: ImportKind;
  line: number;
}

/** A dynamic `import(expr)` whose argument is not a string literal: it cannot be checked. */
export interface OpaqueImport {
  line: number;
}

interface Token {
  /** 'id' identifiers and keywords, 'str' string literals (value unquoted), 'p' punctuation. */
  t: 'id' | 'str' | 'p' | 'num';
  v: string;
  line: number;
}

// After these keywords an expression starts, so `/` opens a regular expression.
const EXPRESSION_KEYWORDS = new Set([
  'return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete', 'void', 'throw', 'case', 'do', 'else', 'yield', 'await',
]);

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  // Each entry is the brace depth at which a template's `${` opened, to resume its text at `}`.
  const templateStack: number[] = [];
  let depth = 0;
  let line = 1;
  let i = src.startsWith('#!') ? src.indexOf('\n') : 0; // a shebang line
  const n = src.length;

  const regexAllowed = (): boolean => {
    const last = tokens[tokens.length - 1];
    if (!last) return true;
    if (last.t === 'str' || last.t === 'num') return false;
    if (last.t === 'id') return EXPRESSION_KEYWORDS.has(last.v);
    return !(last.v === ')' || last.v === ']' || last.v === '}');
  };

  // Skips template text from i (just past a backtick or a closing `}` of `${`); returns true
  // when it stopped at `${` (code follows), false at the closing backtick.
  const templateText = (): boolean => {
    while (i < n) {
      const c = src[i];
      if (c === '\\') {
        i += 2;
        continue;
      }
      if (c === '\n') line++;
      if (c === '`') {
        i++;
        return false;
      }
      if (c === '$' && src[i + 1] === '{') {
        i += 2;
        return true;
      }
      i++;
    }
    throw new Error('unterminated template literal');
  };

  while (i < n) {
    const c = src[i] as string;
    if (c === '\n') {
      line++;
      i++;
      continue;
    }
    if (c === ' ' || c === '\t' || c === '\r') {
      i++;
      continue;
    }
    if (c === '/' && src[i + 1] === '/') {
      while (i < n && src[i] !== '\n') i++;
      continue;
    }
    if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      if (end < 0) throw new Error('unterminated comment');
      for (let k = i; k < end; k++) if (src[k] === '\n') line++;
      i = end + 2;
      continue;
    }
    if (c === '"' || c === "'") {
      const start = line;
      let value = '';
      i++;
      while (i < n && src[i] !== c) {
        if (src[i] === '\\') {
          value += src[i + 1];
          i += 2;
          continue;
        }
        if (src[i] === '\n') throw new Error(`unterminated string at line ${start}`);
        value += src[i];
        i++;
      }
      i++;
      tokens.push({ t: 'str', v: value, line: start });
      continue;
    }
    if (c === '`') {
      i++;
      const start = line;
      if (templateText()) templateStack.push(depth);
      // A template stands for one value; a `str` token would let `import(`...`)` pass as literal.
      tokens.push({ t: 'p', v: '`', line: start });
      continue;
    }
    if (c === '/' && regexAllowed()) {
      let inClass = false;
      i++;
      while (i < n) {
        const r = src[i];
        if (r === '\\') {
          i += 2;
          continue;
        }
        if (r === '\n') throw new Error(`unterminated regular expression at line ${line}`);
        if (r === '[') inClass = true;
        else if (r === ']') inClass = false;
        else if (r === '/' && !inClass) break;
        i++;
      }
      i++;
      while (i < n && /[a-z]/i.test(src[i] as string)) i++;
      tokens.push({ t: 'p', v: '/re/', line });
      continue;
    }
    if (/[A-Za-z_$]/.test(c)) {
      let j = i + 1;
      while (j < n && /[\w$]/.test(src[j] as string)) j++;
      tokens.push({ t: 'id', v: src.slice(i, j), line });
      i = j;
      continue;
    }
    if (/[0-9]/.test(c)) {
      let j = i + 1;
      while (j < n && /[\w.]/.test(src[j] as string)) j++;
      tokens.push({ t: 'num', v: src.slice(i, j), line });
      i = j;
      continue;
    }
    if (c === '{') depth++;
    if (c === '}') {
      if (templateStack.length > 0 && templateStack[templateStack.length - 1] === depth) {
        templateStack.pop();
        i++;
        if (templateText()) templateStack.push(depth);
        continue;
      }
      depth--;
    }
    tokens.push({ t: 'p', v: c, line });
    i++;
  }
  return tokens;
}

/** Every module specifier `src` (TypeScript source text) imports, and its dynamic imports of a computed name. */
export function scanImports(src: string): { imports: FoundImport[]; opaque: OpaqueImport[] } {
  const tokens = tokenize(src);
  const imports: FoundImport[] = [];
  const opaque: OpaqueImport[] = [];
  const at = (k: number): Token | undefined => tokens[k];
  const is = (k: number, v: string): boolean => tokens[k]?.v === v && tokens[k]?.t !== 'str';

  // The `from '...'` that ends an import or export clause starting at k, if the clause has one.
  const fromClause = (k: number): { spec: string; next: number } | null => {
    let braces = 0;
    for (let j = k; j < tokens.length; j++) {
      const tok = tokens[j] as Token;
      if (tok.t === 'p' && tok.v === '{') braces++;
      else if (tok.t === 'p' && tok.v === '}') braces--;
      else if (braces === 0 && tok.t === 'p' && tok.v === ';') return null;
      else if (braces === 0 && tok.t === 'id' && tok.v === 'from' && at(j + 1)?.t === 'str') {
        return { spec: (at(j + 1) as Token).v, next: j + 2 };
      }
      // A clause holds names, `*`, `as`, `type`, commas and braces; anything else ends it.
      else if (!(tok.t === 'id' || (tok.t === 'p' && (tok.v === ',' || tok.v === '*')))) return null;
    }
    return null;
  };

  for (let k = 0; k < tokens.length; k++) {
    const tok = tokens[k] as Token;
    if (tok.t !== 'id') continue;
    const prev = at(k - 1);
    // `x.import` or `{ import: ... }` is a property, not the keyword.
    if (prev?.t === 'p' && prev.v === '.') continue;
    if (tok.v === 'import') {
      if (is(k + 1, '.')) continue; // import.meta
      if (is(k + 1, '(')) {
        const arg = at(k + 2);
        if (arg?.t === 'str' && (is(k + 3, ')') || is(k + 3, ','))) {
          imports.push({ specifier: arg.v, kind: 'dynamic', line: tok.line });
        } else {
          opaque.push({ line: tok.line });
        }
        continue;
      }
      if (is(k + 1, ':')) continue; // a property named import
      const next = at(k + 1);
      if (next?.t === 'str') {
        imports.push({ specifier: next.v, kind: 'side-effect', line: tok.line });
        continue;
      }
      const typeOnly = is(k + 1, 'type') && !(is(k + 2, 'from') && at(k + 3)?.t === 'str') && !is(k + 2, ',');
      const clause = fromClause(k + 1);
      if (clause) imports.push({ specifier: clause.spec, kind: typeOnly ? 'type' : 'static', line: tok.line });
      continue;
    }
    if (tok.v === 'export') {
      const first = at(k + 1);
      const second = is(k + 1, 'type') ? at(k + 2) : first;
      if (second?.t === 'p' && (second.v === '{' || second.v === '*')) {
        const clause = fromClause(k + 1);
        if (clause) imports.push({ specifier: clause.spec, kind: 're-export', line: tok.line });
      }
    }
  }
  return { imports, opaque };
}
