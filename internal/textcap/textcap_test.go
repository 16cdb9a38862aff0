package textcap

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClip_CutsAtACharacterBoundaryAndSaysHowMuch(t *testing.T) {
	tests := []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short enough", "abc", 3, "abc"},
		{"cut", "abcdef", 4, "abcd…[2 bytes cut]"},
		{"not inside a rune", "aé", 2, "a…[2 bytes cut]"},
		{"nothing left", "éé", 1, "…[4 bytes cut]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Clip(tt.s, tt.n))
		})
	}
}
