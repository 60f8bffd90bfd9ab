/**
 * NumPy `.npy` files, parsed from and serialised to bytes (no file system: works in browsers).
 *
 * Format (numpy.lib.format): the magic `\x93NUMPY`, a major and a minor version byte, the
 * header length (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0), then the header: a
 * Python dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` in latin-1
 * (1.0, 2.0) or UTF-8 (3.0), padded with spaces and ended by '\n' so that the data starts on a
 * 64-byte boundary. The data follows, in C (row-major) order.
 *
 * Supported element types: `<f4` (float32 → Float32Array), `<f2` (float16 → raw bits in a
 * Uint16Array, see dtype.ts) and `<i4` (int32 → Int32Array). Everything else is an FAError that
 * says what to do in NumPy.
 */
import { FAError, check } from './errors.js';
import { decode, encode, type DType } from './dtype.js';
import type { HostTensor } from './tensor.js';
import { numel } from './tensor.js';

/** Element types this module reads and writes. */
export type NpyDType = 'float32' | 'float16' | 'int32';

export interface NpyArray {
  readonly dtype: NpyDType;
  /** C-order extents; [] for a 0-d (scalar) array. */
  readonly shape: readonly number[];
  /** float32: Float32Array; float16: raw bit patterns in a Uint16Array; int32: Int32Array. */
  readonly data: Float32Array | Uint16Array | Int32Array;
}

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
const ALIGN = 64; // NumPy >= 1.14 aligns the data to 64 bytes
const GROWTH_AXIS_MAX_DIGITS = 21; // NumPy leaves this much room to grow shape[0] in place

const DESCR: Record<NpyDType, string> = { float32: '<f4', float16: '<f2', int32: '<i4' };
const ITEMSIZE: Record<NpyDType, number> = { float32: 4, float16: 2, int32: 4 };

const littleEndianHost = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function asBytes(input: ArrayBuffer | ArrayBufferView): Uint8Array {
  if (input instanceof Uint8Array) return input;
  if (ArrayBuffer.isView(input)) return new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  if (input instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && (input as unknown) instanceof SharedArrayBuffer)) {
    return new Uint8Array(input as ArrayBuffer);
  }
  throw new FAError('E_ARG', 'parseNpy expects the file bytes as an ArrayBuffer or a typed array (Uint8Array, Buffer)');
}

// ---------------------------------------------------------------------------------------------
// A small parser for the Python literals that appear in .npy headers: dicts, tuples, lists,
// strings, integers and True/False/None.

type PyValue = string | number | boolean | null | PyValue[] | PyTuple | PyDict;
class PyTuple {
  constructor(readonly items: PyValue[]) {}
}
class PyDict {
  constructor(readonly entries: Map<string, PyValue>) {}
}

class HeaderSyntaxError extends Error {}

function parsePyLiteral(src: string): PyValue {
  let i = 0;
  const ws = () => {
    while (i < src.length && /\s/.test(src[i])) i++;
  };
  const fail = (what: string): never => {
    throw new HeaderSyntaxError(`${what} at offset ${i}`);
  };
  const value = (): PyValue => {
    ws();
    const c = src[i];
    if (c === '{') {
      i++;
      const m = new Map<string, PyValue>();
      for (;;) {
        ws();
        if (src[i] === '}') {
          i++;
          return new PyDict(m);
        }
        const key = value();
        if (typeof key !== 'string') fail('a dict key that is not a string');
        ws();
        if (src[i] !== ':') fail("expected ':'");
        i++;
        m.set(key as string, value());
        ws();
        if (src[i] === ',') i++;
        else if (src[i] !== '}') fail("expected ',' or '}'");
      }
    }
    if (c === '(' || c === '[') {
      const close = c === '(' ? ')' : ']';
      i++;
      const items: PyValue[] = [];
      let sawComma = false;
      for (;;) {
        ws();
        if (src[i] === close) {
          i++;
          // "(5)" is the integer 5 in Python, "(5,)" a 1-tuple.
          if (c === '(' && items.length === 1 && !sawComma) return items[0];
          return c === '(' ? new PyTuple(items) : items;
        }
        items.push(value());
        ws();
        if (src[i] === ',') {
          i++;
          sawComma = true;
        } else if (src[i] !== close) fail(`expected ',' or '${close}'`);
      }
    }
    if (c === "'" || c === '"') {
      i++;
      let s = '';
      while (i < src.length && src[i] !== c) {
        if (src[i] === '\\') {
          i++;
          const e = src[i];
          s += e === 'n' ? '\n' : e === 't' ? '\t' : e === 'r' ? '\r' : e === '0' ? '\0' : e;
        } else s += src[i];
        i++;
      }
      if (i >= src.length) fail('an unterminated string');
      i++;
      return s;
    }
    const m = /^(?:[-+]?\d+[lL]?|True|False|None)/.exec(src.slice(i));
    if (!m) fail('an unexpected character ' + JSON.stringify(src[i] ?? 'end of header'));
    const tok = m![0];
    i += tok.length;
    if (tok === 'True') return true;
    if (tok === 'False') return false;
    if (tok === 'None') return null;
    const n = Number(tok.replace(/[lL]$/, ''));
    if (!Number.isSafeInteger(n)) fail(`an integer too large (${tok})`);
    return n;
  };
  const v = value();
  ws();
  if (i !== src.length) fail('trailing characters after the literal');
  return v;
}

// ---------------------------------------------------------------------------------------------

function descrToDType(descr: string, what: string): NpyDType {
  switch (descr) {
    case '<f4':
      return 'float32';
    case '<f2':
      return 'float16';
    case '<i4':
      return 'int32';
  }
  const kind = descr.slice(1);
  const order = descr[0];
  if ((order === '>' || (order === '=' && !littleEndianHost)) && ['f4', 'f2', 'i4', 'f8'].includes(kind)) {
    throw new FAError('E_DTYPE', `${what}: big-endian data (${descr}) is not supported; save it little-endian, e.g. np.save(path, arr.astype('<${kind === 'f8' ? 'f4' : kind}'))`);
  }
  if (order === '=' && ['f4', 'f2', 'i4'].includes(kind)) return descrToDType('<' + kind, what);
  if (kind === 'f8') {
    throw new FAError('E_DTYPE', `${what}: float64 (${descr}) is not supported; save float32 instead: np.save(path, arr.astype(np.float32))`);
  }
  if (kind === 'i8' || kind === 'u8' || kind === 'i2' || kind === 'u4') {
    throw new FAError('E_DTYPE', `${what}: integer dtype ${descr} is not supported; use int32: np.save(path, arr.astype(np.int32))`);
  }
  throw new FAError('E_DTYPE', `${what}: dtype ${descr} is not supported; use float32 ('<f4'), float16 ('<f2') or int32 ('<i4'), e.g. arr.astype(np.float32)`);
}

/**
 * Parses the bytes of a .npy file (versions 1.0, 2.0, 3.0; C order; little-endian float32,
 * float16 or int32). The returned data is a fresh copy, aligned for its typed array.
 * `what` names the source in error messages (a file name, say).
 *
 * Errors: E_IO for anything that is not a well-formed .npy file (bad magic, unknown version,
 * bad header, truncated data, Fortran order); E_DTYPE for an element type it does not read.
 */
export function parseNpy(input: ArrayBuffer | ArrayBufferView, what = 'npy'): NpyArray {
  const bytes = asBytes(input);
  const isMagic = bytes.length >= 6 && MAGIC.every((b, i) => bytes[i] === b);
  check(isMagic, 'E_IO', `${what}: not a .npy file (it does not start with the magic "\\x93NUMPY"); write it with np.save`);
  check(bytes.length >= 10, 'E_IO', `${what}: truncated .npy file (${bytes.length} bytes, the preamble alone needs 10)`);
  const major = bytes[6];
  const minor = bytes[7];
  check(major >= 1 && major <= 3 && minor === 0, 'E_IO', `${what}: unsupported .npy format version ${major}.${minor} (this reader knows 1.0, 2.0 and 3.0)`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let headerStart: number;
  let headerLen: number;
  if (major === 1) {
    headerLen = dv.getUint16(8, true);
    headerStart = 10;
  } else {
    check(bytes.length >= 12, 'E_IO', `${what}: truncated .npy file (${bytes.length} bytes, a version ${major}.0 preamble needs 12)`);
    headerLen = dv.getUint32(8, true);
    headerStart = 12;
  }
  const dataStart = headerStart + headerLen;
  check(dataStart <= bytes.length, 'E_IO', `${what}: truncated .npy file: the header says it is ${headerLen} bytes long but only ${bytes.length - headerStart} follow`);
  const headerBytes = bytes.subarray(headerStart, dataStart);
  let header: string;
  if (major === 3) {
    try {
      header = new TextDecoder('utf-8', { fatal: true }).decode(headerBytes);
    } catch {
      throw new FAError('E_IO', `${what}: the .npy 3.0 header is not valid UTF-8`);
    }
  } else {
    header = '';
    for (const b of headerBytes) header += String.fromCharCode(b); // latin-1
  }

  let lit: PyValue;
  try {
    lit = parsePyLiteral(header);
  } catch (e) {
    const detail = e instanceof HeaderSyntaxError ? e.message : String(e);
    throw new FAError('E_IO', `${what}: the .npy header is not a Python dict literal (${detail}): ${JSON.stringify(header.trim().slice(0, 120))}`);
  }
  check(lit instanceof PyDict, 'E_IO', `${what}: the .npy header is not a dict: ${JSON.stringify(header.trim().slice(0, 120))}`);
  const d = (lit as PyDict).entries;
  const keys = [...d.keys()].sort();
  check(
    keys.length === 3 && keys[0] === 'descr' && keys[1] === 'fortran_order' && keys[2] === 'shape',
    'E_IO',
    `${what}: the .npy header must have exactly the keys 'descr', 'fortran_order' and 'shape'; it has ${keys.map((k) => `'${k}'`).join(', ') || 'none'}`,
  );

  const descrV = d.get('descr')!;
  if (typeof descrV !== 'string') {
    throw new FAError('E_DTYPE', `${what}: structured or record dtypes are not supported; save a plain float32 array (np.ascontiguousarray(arr, dtype=np.float32))`);
  }
  const dtype = descrToDType(descrV, what);

  const shapeV = d.get('shape')!;
  check(shapeV instanceof PyTuple, 'E_IO', `${what}: the .npy header's shape is not a tuple: ${JSON.stringify(header.trim().slice(0, 120))}`);
  const shape: number[] = [];
  for (const s of (shapeV as PyTuple).items) {
    check(typeof s === 'number' && Number.isSafeInteger(s) && s >= 0, 'E_IO', `${what}: the .npy shape has an extent that is not a non-negative integer: ${JSON.stringify(header.trim())}`);
    shape.push(s as number);
  }

  const fortran = d.get('fortran_order');
  check(typeof fortran === 'boolean', 'E_IO', `${what}: the .npy header's fortran_order is not True or False`);
  // Fortran and C order coincide when at most one extent exceeds 1 (a vector, a scalar).
  if (fortran && shape.filter((s) => s > 1).length > 1) {
    throw new FAError('E_IO', `${what}: Fortran-order (column-major) arrays are not supported; save a C-order copy: np.save(path, np.ascontiguousarray(arr))`);
  }

  const n = numel(shape);
  const itemsize = ITEMSIZE[dtype];
  const need = n * itemsize;
  const have = bytes.length - dataStart;
  check(have >= need, 'E_IO', `${what}: truncated .npy file: shape (${shape.join(', ')}) of ${descrV} needs ${need} data bytes, the file has ${have}`);

  const raw = bytes.subarray(dataStart, dataStart + need);
  let data: Float32Array | Uint16Array | Int32Array;
  if (littleEndianHost) {
    const copy = new Uint8Array(need);
    copy.set(raw);
    data = dtype === 'float32' ? new Float32Array(copy.buffer) : dtype === 'int32' ? new Int32Array(copy.buffer) : new Uint16Array(copy.buffer);
  } else {
    const rv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    if (dtype === 'float32') data = Float32Array.from({ length: n }, (_, i) => rv.getFloat32(4 * i, true));
    else if (dtype === 'int32') data = Int32Array.from({ length: n }, (_, i) => rv.getInt32(4 * i, true));
    else data = Uint16Array.from({ length: n }, (_, i) => rv.getUint16(2 * i, true));
  }
  return { dtype, shape, data };
}

function dtypeOfData(data: unknown): NpyDType {
  if (data instanceof Float32Array) return 'float32';
  if (data instanceof Uint16Array) return 'float16';
  if (data instanceof Int32Array) return 'int32';
  throw new FAError('E_DTYPE', 'serializeNpy: data must be a Float32Array (float32), a Uint16Array (float16 bits) or an Int32Array (int32)');
}

/** Python's repr of a tuple of ints: "()", "(5,)", "(2, 3)". */
function shapeRepr(shape: readonly number[]): string {
  if (shape.length === 1) return `(${shape[0]},)`;
  return `(${shape.join(', ')})`;
}

/** The header text NumPy writes, without the padding and '\n'. */
function headerText(dtype: NpyDType, shape: readonly number[]): string {
  let h = `{'descr': '${DESCR[dtype]}', 'fortran_order': False, 'shape': ${shapeRepr(shape)}, }`;
  // Like NumPy: spare room so shape[0] can grow in place (numpy.lib.format._write_array_header).
  if (shape.length > 0) h += ' '.repeat(Math.max(0, GROWTH_AXIS_MAX_DIGITS - String(shape[0]).length));
  return h;
}

/**
 * Serialises an array as a .npy file, byte for byte as `np.save` does: version 1.0 (2.0 only if
 * the header would not fit a 16-bit length), C order, little-endian, the header padded with
 * spaces and ended by '\n' so that the data starts on a 64-byte boundary.
 * The element type follows the data: Float32Array → '<f4', Uint16Array (f16 bits) → '<f2',
 * Int32Array → '<i4'; `dtype`, if given, must agree.
 */
export function serializeNpy(array: { readonly data: Float32Array | Uint16Array | Int32Array; readonly shape: readonly number[]; readonly dtype?: NpyDType }): Uint8Array {
  const dtype = dtypeOfData(array.data);
  check(array.dtype === undefined || array.dtype === dtype, 'E_DTYPE', () => `serializeNpy: dtype ${array.dtype} does not match the data (${array.data.constructor.name} holds ${dtype})`);
  const shape = array.shape;
  check(Array.isArray(shape) && shape.every((s) => Number.isSafeInteger(s) && s >= 0), 'E_SHAPE', 'serializeNpy: shape must be an array of non-negative integers');
  const n = numel(shape);
  check(n === array.data.length, 'E_SHAPE', () => `serializeNpy: shape [${shape.join(', ')}] needs ${n} elements, the data has ${array.data.length}`);

  const text = headerText(dtype, shape);
  let major = 1;
  let prefix = 10;
  let hlen = text.length + 1; // + '\n'
  let pad = ALIGN - ((prefix + hlen) % ALIGN);
  if (hlen + pad > 0xffff) {
    major = 2;
    prefix = 12;
    pad = ALIGN - ((prefix + hlen) % ALIGN);
  }
  hlen += pad;
  const itemsize = ITEMSIZE[dtype];
  const out = new Uint8Array(prefix + hlen + n * itemsize);
  out.set(MAGIC, 0);
  out[6] = major;
  out[7] = 0;
  const dv = new DataView(out.buffer);
  if (major === 1) dv.setUint16(8, hlen, true);
  else dv.setUint32(8, hlen, true);
  for (let i = 0; i < text.length; i++) out[prefix + i] = text.charCodeAt(i);
  out.fill(0x20, prefix + text.length, prefix + hlen - 1);
  out[prefix + hlen - 1] = 0x0a;
  const at = prefix + hlen;
  if (littleEndianHost) {
    out.set(new Uint8Array(array.data.buffer, array.data.byteOffset, n * itemsize), at);
  } else {
    for (let i = 0; i < n; i++) {
      if (dtype === 'float32') dv.setFloat32(at + 4 * i, array.data[i], true);
      else if (dtype === 'int32') dv.setInt32(at + 4 * i, array.data[i], true);
      else dv.setUint16(at + 2 * i, array.data[i], true);
    }
  }
  return out;
}

/**
 * A host tensor in `dtype` from a float32 or float16 .npy array, rounding to nearest (ties to
 * even) where the dtype is narrower. (float16 → bf16 goes through float32, which holds every
 * float16 exactly, so it is rounded once.)
 */
export function npyToTensor(a: NpyArray, dtype: DType = 'f32'): HostTensor {
  check(a.dtype === 'float32' || a.dtype === 'float16', 'E_DTYPE', `npyToTensor: a ${a.dtype} array is not a float tensor; save float32 (arr.astype(np.float32))`);
  const shape = [...a.shape];
  if (a.dtype === 'float16') {
    const bits = a.data as Uint16Array;
    if (dtype === 'f16') return { kind: 'host', dtype, shape, data: bits };
    const f = decode('f16', bits);
    return dtype === 'f32' ? { kind: 'host', dtype, shape, data: f } : { kind: 'host', dtype, shape, data: encode('bf16', f) };
  }
  const f = a.data as Float32Array;
  return dtype === 'f32' ? { kind: 'host', dtype, shape, data: f } : { kind: 'host', dtype, shape, data: encode(dtype, f) };
}

/**
 * A .npy array from a host tensor: f32 → float32, f16 → float16 bits, and (.npy has no bf16)
 * bf16 → float32, which holds every bf16 value exactly. Pass `asFloat32` to widen f16 too.
 */
export function tensorToNpy(t: HostTensor, asFloat32 = false): NpyArray {
  if (t.dtype === 'f32') return { dtype: 'float32', shape: [...t.shape], data: t.data as Float32Array };
  if (t.dtype === 'f16' && !asFloat32) return { dtype: 'float16', shape: [...t.shape], data: t.data as Uint16Array };
  return { dtype: 'float32', shape: [...t.shape], data: decode(t.dtype, t.data as Uint16Array) };
}
