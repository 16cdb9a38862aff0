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
//	format       uint16, checkpointFormat (1 or 2)
//	identity     uvarint length, bytes: what was mirrored (see CheckpointOptions.Identity)
//	version      uvarint length, bytes: the resource version the objects are at
//	written at   int64, Unix nanoseconds
//	count        uvarint: how many objects follow
//	indexed      1 byte, format 2 only: 1 if each object's key and version precede it
//	objects      count times: if indexed, the key and the object's version
//	             (uvarint length, bytes, each); then uvarint length, bytes
//	             (the Codec's encoding)
//	checksum     uint32, CRC-32C of everything above
//
// A file that is shorter, longer, or whose checksum does not match is
// refused whole: a checkpoint is used entirely or not at all. Format 1
// (no indexed byte, no keys) is still read; a file in a later format is
// refused as invalid.
//
// The keys and versions let an informer that learns, while it loads, that
// the source no longer has the checkpoint's version compare its first list
// with the checkpoint without decoding it (see checkpointIndex). They are
// written when the informer's keys are strings and it has a
// ResourceVersion function.
const (
	checkpointMagic  = "mirrorCP"
	checkpointFormat = 2
	// checkpointFormatPlain is the format before keys and versions.
	checkpointFormatPlain = 1
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
func writeCheckpoint[T any](path string, h checkpointHeader, objs func(yield func(T) bool), codec Codec[T]) error {
	return writeIndexedCheckpoint(path, h, objs, codec, nil)
}

// writeIndexedCheckpoint is writeCheckpoint, with each object's key and
// version, which index returns, before it if index is not nil. index
// runs the user's functions: a panic fails the write as the codec's does.
func writeIndexedCheckpoint[T any](path string, h checkpointHeader, objs func(yield func(T) bool), codec Codec[T], index func(T) (key, version string)) (err error) {
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
	if index != nil {
		buf = append(buf, 1)
	} else {
		buf = append(buf, 0)
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	var encErr error
	for obj := range objs {
		// Length first: encode after room for the longest uvarint,
		// then move the encoding up to its length if that is shorter.
		buf = buf[:0]
		inCodec = true
		if index != nil {
			key, version := index(obj)
			buf = appendField(buf, key)
			buf = appendField(buf, version)
		}
		pre := len(buf)
		buf = append(buf, make([]byte, binary.MaxVarintLen64)...)
		buf, encErr = codec.Append(buf, obj)
		inCodec = false
		if encErr != nil {
			encErr = fmt.Errorf("encode object %d: %w", n, encErr)
			break
		}
		size := len(buf) - pre - binary.MaxVarintLen64
		var lenBuf [binary.MaxVarintLen64]byte
		k := binary.PutUvarint(lenBuf[:], uint64(size))
		start := pre + binary.MaxVarintLen64 - k
		copy(buf[start:], lenBuf[:k])
		if _, err := w.Write(buf[:pre]); err != nil {
			return err
		}
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

// checkpointFile is a checkpoint read whole and checked: its header and
// its objects, as written.
type checkpointFile struct {
	header checkpointHeader
	// indexed says that each object's key and version precede it.
	indexed bool
	// objects are the objects' records, count of them, each checked to
	// lie within the file.
	objects []byte
}

// readCheckpointFile reads the checkpoint at path, written for identity,
// whole. Once it has read the header, before it checks the rest, it calls
// reserve, if not nil, with the header (its version read, its count not
// yet checked) and how many objects there may be (what the header says,
// bounded by what the file can hold), so that the caller can start what
// depends on the version and make room for the objects at once. It returns
// the file once every byte of it is checked: the checksum, the count, and
// that each record lies within it.
func readCheckpointFile(path, identity string, reserve func(h checkpointHeader, n int)) (*checkpointFile, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, st.Size())
	// The header first, so that what depends on its version starts while
	// the rest is read.
	head := min(len(data), headerPeek)
	if _, err := io.ReadFull(file, data[:head]); err != nil {
		return nil, fmt.Errorf("%w: truncated: %w", ErrCheckpointInvalid, err)
	}
	if reserve != nil {
		if h, count, _, rest, err := parseHeader(data[:head], identity); err == nil {
			reserve(h, int(min(count, uint64(len(data)-(head-len(rest.b))))))
			reserve = nil
		}
	}
	if _, err := io.ReadFull(file, data[head:]); err != nil {
		return nil, fmt.Errorf("%w: truncated: %w", ErrCheckpointInvalid, err)
	}
	f, err := parseCheckpoint(data, identity, reserve)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointInvalid, err)
	}
	return f, nil
}

// headerPeek is how much of a checkpoint is read before its header is
// parsed: enough for any header but one of an unusually long identity or
// version, which is parsed once the whole file is read.
const headerPeek = 4096

var errTruncated = errors.New("truncated")

// parseHeader parses the header at the start of data, up to the count,
// and checks its magic, format and identity. It returns the header, the
// count, the format and the rest of data.
func parseHeader(data []byte, identity string) (h checkpointHeader, count uint64, format uint16, rest checkpointBytes, err error) {
	if len(data) < len(checkpointMagic)+2 {
		if len(data) >= len(checkpointMagic) && string(data[:len(checkpointMagic)]) != checkpointMagic {
			return h, 0, 0, rest, errors.New("not a checkpoint")
		}
		return h, 0, 0, rest, errTruncated
	}
	if string(data[:len(checkpointMagic)]) != checkpointMagic {
		return h, 0, 0, rest, errors.New("not a checkpoint")
	}
	r := checkpointBytes{b: data[len(checkpointMagic):]}
	format = binary.LittleEndian.Uint16(r.next(2))
	if format != checkpointFormat && format != checkpointFormatPlain {
		return h, 0, 0, rest, fmt.Errorf("format %d, this version reads %d and %d", format, checkpointFormatPlain, checkpointFormat)
	}
	h.identity = string(r.field())
	if r.err == nil && h.identity != identity {
		return h, 0, 0, rest, fmt.Errorf("written for %q, not %q", h.identity, identity)
	}
	h.version = string(r.field())
	if b := r.next(8); b != nil {
		h.writtenAt = time.Unix(0, int64(binary.LittleEndian.Uint64(b)))
	}
	count = r.uvarint()
	return h, count, format, r, r.err
}

func parseCheckpoint(data []byte, identity string, reserve func(h checkpointHeader, n int)) (*checkpointFile, error) {
	if len(data) < len(checkpointMagic)+2+4 {
		_, _, _, _, err := parseHeader(data, identity)
		if err == nil {
			err = errTruncated
		}
		return nil, err
	}
	body, stored := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	h, count, format, r, err := parseHeader(body, identity)
	if err != nil {
		return nil, err
	}
	f := checkpointFile{header: h}
	if reserve != nil {
		// The count is not checked until the checksum is: an object
		// takes at least its length's byte, so the file bounds it.
		reserve(f.header, int(min(count, uint64(len(r.b)))))
	}
	if crc32.Checksum(body, crc32c) != stored {
		// Read whole, a file cut short ends in bytes that are no
		// checksum of it.
		return nil, errors.New("checksum mismatch")
	}
	if format == checkpointFormat {
		// The index flag.
		if b := r.next(1); b != nil {
			if b[0] > 1 {
				return nil, errors.New("bad index flag")
			}
			f.indexed = b[0] == 1
		}
	}
	f.objects = r.b
	fields := 1
	if f.indexed {
		fields = 3
	}
	for range count {
		for range fields {
			r.field()
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	if r.err == nil && len(r.b) != 0 {
		return nil, errors.New("data after the objects")
	}
	f.header.count = int(count)
	return &f, r.err
}

// records calls each with every object's key and version (nil unless the
// file is indexed) and encoding, in the order they were written, until it
// returns false. The file is checked: every record is whole.
func (f *checkpointFile) records(each func(key, version, data []byte) bool) {
	r := checkpointBytes{b: f.objects}
	for range f.header.count {
		var key, version []byte
		if f.indexed {
			key, version = r.field(), r.field()
		}
		if !each(key, version, r.field()) {
			return
		}
	}
}

// checkpointBytes reads a checkpoint's fields from memory. Its first
// failure sticks in err, and every later read returns nil.
type checkpointBytes struct {
	b   []byte
	err error
}

// next returns the next n bytes.
func (r *checkpointBytes) next(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errTruncated
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *checkpointBytes) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[k:]
	return v
}

// field reads a length and that many bytes.
func (r *checkpointBytes) field() []byte {
	return r.next(r.uvarint())
}

// loadCheckpoint reads the checkpoint at path, written for identity, and
// calls each with every object it holds, in the order they were written;
// reserve is as for readCheckpointFile. It returns the header once the
// whole file has been read and checked; if it returns an error, the caller
// must discard whatever each was given. An error from each ends the load
// and is returned.
func loadCheckpoint[T any](path, identity string, codec Codec[T], reserve func(h checkpointHeader, n int), each func(T) error) (checkpointHeader, error) {
	h, err := readCheckpoint(path, identity, codec, reserve, each)
	if err != nil {
		return h, &CheckpointError{Op: "load", Path: path, Err: err}
	}
	return h, nil
}

func readCheckpoint[T any](path, identity string, codec Codec[T], reserve func(h checkpointHeader, n int), each func(T) error) (checkpointHeader, error) {
	f, err := readCheckpointFile(path, identity, reserve)
	if err != nil {
		return checkpointHeader{}, err
	}
	return f.header, decodeRecords(f, codec, 0, nil, each)
}

// decodeRecords decodes the objects of f and calls each with them, in the
// order they were written. Every checkEvery objects, if checkEvery > 0,
// it asks stop whether to go on, and returns errStopped if not. The codec
// and each are the user's: a panic fails the load as their error would.
func decodeRecords[T any](f *checkpointFile, codec Codec[T], checkEvery int, stop func() bool, each func(T) error) (err error) {
	i := 0 // the object being read
	inUser := false
	defer func() {
		if inUser {
			if v := recover(); v != nil {
				err = fmt.Errorf("%w: object %d: %w", ErrCheckpointInvalid, i, panicked(v))
			}
		}
	}()
	f.records(func(_, _, data []byte) bool {
		if stop != nil && i%checkEvery == 0 && stop() {
			err = errStopped
			return false
		}
		inUser = true
		obj, derr := codec.Decode(data)
		inUser = false
		if derr != nil {
			err = fmt.Errorf("%w: object %d: %w", ErrCheckpointInvalid, i, derr)
			return false
		}
		inUser = true
		err = each(obj)
		inUser = false
		if err != nil {
			return false
		}
		i++
		return true
	})
	return err
}

// errStopped ends a decode its caller stopped.
var errStopped = errors.New("stopped")
