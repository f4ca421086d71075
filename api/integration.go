package api

import "strings"

// IntegrationName keeps what a log line and an event header can safely
// carry of an x-integration-name header, whichever transport brought it.
func IntegrationName(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 100 {
		v = v[:100]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, v)
}
