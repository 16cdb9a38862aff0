package mirror

import (
	"fmt"
	"runtime/debug"
)

// PanicError reports a panic in a user function that was recovered: a
// key, index or transform function, SameObject or ResourceVersion (see
// InformerOptions), a checkpoint's Codec, a source's decode function, or
// an event handler (in a *HandlerPanicError).
//
// A function called on an object does not crash the process: the panic is
// that object's failure, reported as the function's error would be, and
// the object is skipped as it would be for that error. The *PanicError is
// the Err of a *KeyError or an *IndexError, or is wrapped, with the name
// of the function, in an *ObjectError or a transform's error; either way
// the error names the object, and errors.As finds the *PanicError. A
// function called again on an object it accepted before (a key function
// on a stored object, an index function to find a stored object's index
// entries) is not guarded: it did not panic on that object then, and one
// that depends only on its argument, as these must, does not panic now.
type PanicError struct {
	// Value is the value the function panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

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
// object whose key is key.
func transformError(key any, err error) error {
	return fmt.Errorf("mirror: transform object with key %v: %w", key, err)
}

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
// *PanicError) as a transform error naming obj.
func transformGuarded[T any](f TransformFunc[T], obj T) (out T, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = transformError(obj, panicked(v))
		}
	}()
	if out, err = f(obj); err != nil {
		err = transformError(obj, err)
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
