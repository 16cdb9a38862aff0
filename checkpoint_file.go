package mirror

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A checkpoint file holds, in this order, little-endian:
//
//	magic        8 bytes, "mirrorCP"
//	format       uint16, checkpointFormat
//	identity     uvarint length, bytes: what was mirrored (see CheckpointOptions.Identity)
//	version      uvarint length, bytes: the resource version the objects are at
//	written at   int64, Unix nanoseconds
//	count        uvarint: how many objects follow
//	objects      count times: uvarint length, bytes (the Codec's encoding)
//	checksum     uint32, CRC-32C of everything above
//
// A file that is shorter, longer, or whose checksum does not match is
// refused whole: a checkpoint is used entirely or not at all.
const (
	checkpointMagic  = "mirrorCP"
	checkpointFormat = 1
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// Checkpoint errors, wrapped by a *CheckpointError.
var (
	// ErrCheckpointInvalid means a checkpoint file cannot be used: it is
	// truncated or corrupt, in a format this version does not read, or
	// was written by a mirror of something else. It is ignored, and the
	// informer lists its source instead.
	ErrCheckpointInvalid = errors.New("mirror: invalid checkpoint")
)

// CheckpointError reports a checkpoint that could not be written, or
// loaded. A missing file wraps fs.ErrNotExist; an unusable one wraps
// ErrCheckpointInvalid.
type CheckpointError struct {
	// Op is "load" or "write".
	Op string
	// Path is the checkpoint's file.
	Path string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *CheckpointError) Error() string {
	return fmt.Sprintf("mirror: %s checkpoint %s: %v", e.Op, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *CheckpointError) Unwrap() error { return e.Err }

// checkpointHeader is what a checkpoint says about its objects.
type checkpointHeader struct {
	identity  string
	version   string
	writtenAt time.Time
	count     int
}

// writeCheckpoint writes a checkpoint of objs (count of them) at version to
// path, atomically: it writes a temporary file in the same directory,
// syncs it, renames it over path and syncs the directory, so that path
// holds either the previous checkpoint or this one, whole, whatever
// happens meanwhile (a crash, a full disk, an error from the codec).
func writeCheckpoint[T any](path string, h checkpointHeader, objs func(yield func(T) bool), codec Codec[T]) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+".tmp*")
	if err != nil {
		return &CheckpointError{Op: "write", Path: path, Err: err}
	}
	n := 0 // objects written
	inCodec := false
	defer func() {
		if inCodec {
			// The codec is the user's: a panic fails the write as an
			// error would.
			if v := recover(); v != nil {
				err = fmt.Errorf("encode object %d: %w", n, panicked(v))
			}
		}
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = &CheckpointError{Op: "write", Path: path, Err: err}
		}
	}()
	crc := crc32.New(crc32c)
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)
	var buf []byte
	buf = append(buf, checkpointMagic...)
	buf = binary.LittleEndian.AppendUint16(buf, checkpointFormat)
	buf = appendField(buf, h.identity)
	buf = appendField(buf, h.version)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(h.writtenAt.UnixNano()))
	buf = binary.AppendUvarint(buf, uint64(h.count))
	if _, err := w.Write(buf); err != nil {
		return err
	}
	var encErr error
	for obj := range objs {
		// Length first: encode after room for the longest uvarint,
		// then move the encoding up to its length if that is shorter.
		buf = buf[:binary.MaxVarintLen64]
		inCodec = true
		buf, encErr = codec.Append(buf, obj)
		inCodec = false
		if encErr != nil {
			encErr = fmt.Errorf("encode object %d: %w", n, encErr)
			break
		}
		size := len(buf) - binary.MaxVarintLen64
		var lenBuf [binary.MaxVarintLen64]byte
		k := binary.PutUvarint(lenBuf[:], uint64(size))
		start := binary.MaxVarintLen64 - k
		copy(buf[start:], lenBuf[:k])
		if _, err := w.Write(buf[start:]); err != nil {
			return err
		}
		n++
	}
	if encErr != nil {
		return encErr
	}
	if n != h.count {
		return fmt.Errorf("%d objects for a header that says %d", n, h.count)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := binary.Write(f, binary.LittleEndian, crc.Sum32()); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// removeStaleTemps removes the temporary files that writeCheckpoint
// creates beside path (see os.CreateTemp: base.tmp followed by digits)
// and that a process killed while writing leaves behind, each as large as
// a checkpoint. It must not run while a write to path is in progress; it
// is best effort: what it cannot list or remove stays.
func removeStaleTemps(path string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := base + ".tmp"
	for _, e := range entries {
		name := e.Name()
		suffix, ok := strings.CutPrefix(name, prefix)
		if !ok || suffix == "" || strings.Trim(suffix, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		_ = os.Remove(filepath.Join(dir, name))
	}
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// loadCheckpoint reads the checkpoint at path, written for identity, and
// calls each with every object it holds, in the order they were written;
// before the first, it calls reserve, if not nil, with the header (its
// version read, its count not yet checked) and how many objects there may
// be (what the header says, bounded by what the file can hold), so that
// the caller can make room for them at once.
// It returns the header once the whole file has been read and checked; if
// it returns an error, the caller must discard whatever each was given:
// the checkpoint may be corrupt, and its checksum is checked only at the
// end. An error from each ends the load and is returned.
func loadCheckpoint[T any](path, identity string, codec Codec[T], reserve func(h checkpointHeader, n int), each func(T) error) (checkpointHeader, error) {
	h, err := readCheckpoint(path, identity, codec, reserve, each)
	if err != nil {
		return h, &CheckpointError{Op: "load", Path: path, Err: err}
	}
	return h, nil
}

func readCheckpoint[T any](path, identity string, codec Codec[T], reserve func(h checkpointHeader, n int), each func(T) error) (h checkpointHeader, err error) {
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	var i uint64 // the object being read
	inUser := false
	defer func() {
		f.Close()
		if inUser {
			// The codec and each (which runs the key and index
			// functions) are the user's: a panic fails the load as
			// their error would.
			if v := recover(); v != nil {
				err = fmt.Errorf("%w: object %d: %w", ErrCheckpointInvalid, i, panicked(v))
			}
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return h, err
	}
	r := &checkpointReader{r: bufio.NewReaderSize(f, 1<<20), left: st.Size()}

	magic := r.bytes(len(checkpointMagic))
	if r.err == nil && string(magic) != checkpointMagic {
		return h, fmt.Errorf("%w: not a checkpoint", ErrCheckpointInvalid)
	}
	format := r.uint16()
	if r.err == nil && format != checkpointFormat {
		return h, fmt.Errorf("%w: format %d, this version reads %d", ErrCheckpointInvalid, format, checkpointFormat)
	}
	h.identity = string(r.field())
	if r.err == nil && h.identity != identity {
		return h, fmt.Errorf("%w: written for %q, not %q", ErrCheckpointInvalid, h.identity, identity)
	}
	h.version = string(r.field())
	h.writtenAt = time.Unix(0, int64(r.uint64()))
	count := r.uvarint()
	if r.err != nil {
		return h, r.err
	}
	if reserve != nil {
		// The count is not checked until the checksum is: an object
		// takes at least its length's byte, so the file bounds it.
		reserve(h, int(min(count, uint64(r.left))))
	}
	for i = 0; i < count; i++ {
		data := r.field()
		if r.err != nil {
			return h, r.err
		}
		inUser = true
		obj, err := codec.Decode(data)
		inUser = false
		if err != nil {
			return h, fmt.Errorf("%w: object %d: %w", ErrCheckpointInvalid, i, err)
		}
		inUser = true
		err = each(obj)
		inUser = false
		if err != nil {
			return h, err
		}
	}
	sum := r.sum
	var stored [4]byte
	if _, err := io.ReadFull(r.r, stored[:]); err != nil {
		return h, fmt.Errorf("%w: truncated: %w", ErrCheckpointInvalid, err)
	}
	if binary.LittleEndian.Uint32(stored[:]) != sum {
		return h, fmt.Errorf("%w: checksum mismatch", ErrCheckpointInvalid)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		return h, fmt.Errorf("%w: data after the checksum", ErrCheckpointInvalid)
	}
	h.count = int(count)
	return h, nil
}

// checkpointReader reads a checkpoint's fields, adding what it reads to
// its checksum, sum. Its first failure sticks in err, and every later read
// returns zero values.
type checkpointReader struct {
	r   *bufio.Reader
	sum uint32
	// left is how many bytes the file has left: a length beyond it is
	// corrupt, and is refused before anything is allocated for it.
	left int64
	buf  []byte
	one  [1]byte // ReadByte's, kept here so that it does not escape
	err  error
}

func (r *checkpointReader) fail(err error) {
	if r.err == nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: truncated", ErrCheckpointInvalid)
		}
		r.err = err
	}
}

// bytes returns the next n bytes, valid until the next read.
func (r *checkpointReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if int64(n) > r.left {
		r.fail(io.ErrUnexpectedEOF)
		return nil
	}
	r.left -= int64(n)
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.fail(err)
		return nil
	}
	r.sum = crc32.Update(r.sum, crc32c, b)
	return b
}

func (r *checkpointReader) uint16() uint16 {
	if b := r.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *checkpointReader) uint64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *checkpointReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(r)
	if err != nil {
		r.fail(err)
		return 0
	}
	return v
}

// field reads a length and that many bytes.
func (r *checkpointReader) field() []byte {
	n := r.uvarint()
	if n > uint64(r.left) {
		r.fail(io.ErrUnexpectedEOF)
		return nil
	}
	return r.bytes(int(n))
}

// ReadByte reads one byte for binary.ReadUvarint, adding it to the
// checksum.
func (r *checkpointReader) ReadByte() (byte, error) {
	c, err := r.r.ReadByte()
	if err == nil {
		r.left--
		r.one[0] = c
		r.sum = crc32.Update(r.sum, crc32c, r.one[:])
	}
	return c, err
}
