package member

import "syscall"

type fsStat struct{ size, free uint64 }

func statfs(dir string) (fsStat, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return fsStat{}, err
	}
	return fsStat{size: s.Blocks * uint64(s.Bsize), free: s.Bavail * uint64(s.Bsize)}, nil
}
