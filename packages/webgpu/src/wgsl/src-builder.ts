/** A small builder of indented WGSL source, line by line. */

export class Src {
  private lines: string[] = [];
  private ind = 0;
  line(s = ''): this {
    for (const l of s.split('\n')) this.lines.push(l.length ? '  '.repeat(this.ind) + l : '');
    return this;
  }
  open(s: string): this {
    this.line(s);
    this.ind++;
    return this;
  }
  close(s = '}'): this {
    this.ind--;
    this.line(s);
    return this;
  }
  toString(): string {
    return this.lines.join('\n');
  }
}
