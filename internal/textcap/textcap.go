// Package textcap bounds text taken from users (error messages, keys,
// panic values) before it goes into an error or a log line, for the core
// and the reconcile package alike.
package textcap

import (
	"strconv"
	"unicode/utf8"
)

// Clip returns s cut to at most n bytes, at a character boundary, with a
// marker saying how much was left out.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[" + strconv.Itoa(len(s)-cut) + " bytes cut]"
}
