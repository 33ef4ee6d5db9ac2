package usage

import "time"

// SetNow sets r's clock.
func (r *Report) SetNow(now func() time.Time) { r.now = now }
