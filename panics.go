package mirror

import (
	"fmt"
	"runtime/debug"

	"github.com/listwatch/mirror/internal/textcap"
)

// PanicError reports a recovered panic in a user function: a key, index
// or transform function, an InformerOptions callback, a Codec, a source's
// decode function, or an event handler (in a *HandlerPanicError). The
// panic is that object's failure, handled as the function's error would
// be; errors.As finds the *PanicError in the error reported. A function
// called again on an object it accepted before is not guarded.
//
// Its message gives the panic's value only if that is a string, an error
// (cut to a bounded length) or a number; any other value is named by its
// type and size.
type PanicError struct {
	// Value is the value the function panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return "panic: " + panicText(e.Value) }

// panicText formats v, a value a function panicked with, for an error:
// the text of a string or an error, cut to maxCauseText; a number or a
// bool as such; anything else by its type and size (see describe).
func panicText(v any) string {
	switch v := v.(type) {
	case string:
		return textcap.Clip(v, maxCauseText)
	case error:
		return causeText(v)
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr, float32, float64:
		return fmt.Sprint(v)
	}
	return describe(v)
}

// panicked returns the *PanicError of v, a value recover returned. The
// function that recovered must call it, so that the stack still shows
// where the panic happened.
func panicked(v any) *PanicError {
	return &PanicError{Value: v, Stack: debug.Stack()}
}

// callback names the user function a step is running. A step sets it
// before each call and clears it after, so that its deferred function
// recovers only a panic in user code (a panic of our own is a bug, and
// goes on) and knows whose failure it is. Steps that handle many objects
// recover around all of them and go on after the one that panicked: a
// deferred function per object would cost every object.
type callback uint8

const (
	noCallback callback = iota
	inKeyFunc
	inIndexFunc
	inTransform
	inSameObject
	inResourceVersion
)

// String returns the option that names the function, for errors.
func (c callback) String() string {
	switch c {
	case inKeyFunc:
		return "KeyFunc"
	case inIndexFunc:
		return "IndexFunc"
	case inTransform:
		return "Transform"
	case inSameObject:
		return "SameObject"
	case inResourceVersion:
		return "ResourceVersion"
	}
	return "no callback"
}

// calling is what user function a step is running on its object; index
// is the position of the index function, for inIndexFunc.
type calling struct {
	fn    callback
	index int
}

// transformError is the error of a transform that failed with err on the
// object whose key is key. It names the key, not the object.
func transformError(key any, err error) error {
	return &wrapError{"mirror: transform object with key " + keyText(key), err}
}

// transformObjectError is the error of a transform that failed with err
// on obj, whose key is not known: it names obj's type and size.
func transformObjectError(obj any, err error) error {
	return &wrapError{"mirror: transform " + describe(obj), err}
}

// wrapError is an error that introduces its cause with msg, and cuts the
// cause's text, which may embed an object, to maxCauseText.
type wrapError struct {
	msg string
	err error
}

func (e *wrapError) Error() string { return e.msg + ": " + causeText(e.err) }
func (e *wrapError) Unwrap() error { return e.err }

// keyOfGuarded is keyOf that also turns a panic of f into obj's
// *KeyError. It costs a deferred call, so it serves the lookups by object
// (Get); the paths every object takes fold the recovery into a deferred
// call they make anyway.
func keyOfGuarded[K comparable, T any](f KeyFunc[K, T], obj T) (key K, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &KeyError{Object: obj, Err: panicked(v)}
		}
	}()
	return keyOf(f, obj)
}

// transformGuarded applies f to obj, returning its failure or panic (a
// *PanicError) as a transform error naming obj's type and size.
func transformGuarded[T any](f TransformFunc[T], obj T) (out T, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = transformObjectError(obj, panicked(v))
		}
	}()
	if out, err = f(obj); err != nil {
		err = transformObjectError(obj, err)
	}
	return out, err
}

// callbackFailure returns the error of obj, whose key is key, on which the
// key function or the transform (fn) panicked with v. The function that
// recovered must call it (see panicked).
func callbackFailure(fn callback, key, obj, v any) error {
	if fn == inTransform {
		return transformError(key, panicked(v))
	}
	return &KeyError{Object: obj, Err: panicked(v)}
}
