#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int open_regular(const char *path, unsigned *mode) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    if (mode) *mode = (unsigned)st.st_mode;
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return OPEN_NOT_REGULAR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

FILE *fopen_regular(const char *path, int *not_regular, unsigned *mode) {
    *not_regular = 0;
    int fd = open_regular(path, mode);
    if (fd == OPEN_NOT_REGULAR) *not_regular = 1;
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

const char *file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a file";
    }
}
