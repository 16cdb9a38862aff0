package mirror

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHandlerPanicError_AHugeHandlerNameIsCut(t *testing.T) {
	name := strings.Repeat("h", 1<<20)
	err := &HandlerPanicError{Handler: name, PanicError: PanicError{Value: "boom"}}
	text := err.Error()
	assert.LessOrEqual(t, len(text), 4096)
	assert.True(t, strings.Contains(text, "bytes cut]"), "the name is cut, and says so")
	assert.True(t, strings.HasSuffix(text, "panicked: boom"), "the panic follows the name")
}
