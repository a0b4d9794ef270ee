package dispatch

import (
	"os/user"
	"strconv"
)

// UserName names the user with this uid for a message: their login name,
// or the uid when the name is unknown.
func UserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}
