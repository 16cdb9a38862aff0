package k8s

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestWithoutManagedFields_DropsThemAndKeepsTheRest(t *testing.T) {
	withFields := managedPod("ns", "web", "7")
	withFields.Annotations = map[string]string{"a": "b"}
	without := stripped(withFields)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"with managedFields", withFields},
		{"without managedFields", without},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := tc.pod.Marshal()
			require.NoError(t, err)
			out, _, err := withoutManagedFields(msg, nil)
			require.NoError(t, err)
			var got corev1.Pod
			require.NoError(t, got.Unmarshal(out))
			assert.Equal(t, without, &got)
		})
	}
}

func TestWireDecoding_MalformedInputIsAnErrorNotAPanic(t *testing.T) {
	p := managedPod("ns", "web", "7")
	msg, err := p.Marshal()
	require.NoError(t, err)
	// Every truncation of a valid message, and a few bytes of nonsense.
	inputs := [][]byte{{0xff}, {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {0x0a, 0x05, 0x01}, {0x0f}}
	for i := range msg {
		inputs = append(inputs, msg[:i])
	}
	for _, in := range inputs {
		assert.NotPanics(t, func() {
			_, _, _ = withoutManagedFields(in, nil)
			_, _, _ = unwrapObject(append([]byte("k8s\x00"), in...))
		})
	}
	_, _, err = withoutManagedFields([]byte{0x0a, 0x05, 0x01}, nil)
	require.ErrorIs(t, err, errProto)
	_, _, err = unwrapObject([]byte("{}"))
	require.ErrorIs(t, err, errProto)
}
