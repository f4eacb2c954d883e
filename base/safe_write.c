/* safe_write.c: atomic replacement of a regular file (see safe_write.h). */
#include "base/safe_write.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

/* The file a write to path would replace: path itself, or the end of its
 * chain of links.  *exists says whether it is there; its mode in *st. */
static int resolve(const char *path, char **dest, int *exists, struct stat *st, strata_error *err)
{
    struct stat lst;
    *exists = 0;
    if (lstat(path, &lst) != 0) {
        if (errno != ENOENT)
            return strata_err(err, STRATA_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        *dest = strdup(path);
        return *dest ? 0 : strata_err(err, STRATA_E_NOMEM, "%s: out of memory", path);
    }
    if (S_ISLNK(lst.st_mode)) {
        char *r = realpath(path, NULL);
        if (!r)
            return strata_err(err, STRATA_E_IO, "%s: is a symbolic link that does not lead to a "
                              "file (%s); refusing to write through it", path, strerror(errno));
        if (stat(r, st) != 0) {
            int e = errno;
            free(r);
            return strata_err(err, STRATA_E_IO, "%s: cannot stat: %s", path, strerror(e));
        }
        *dest = r;
    } else {
        *st = lst;
        if (!(*dest = strdup(path)))
            return strata_err(err, STRATA_E_NOMEM, "%s: out of memory", path);
    }
    *exists = 1;
    if (!S_ISREG(st->st_mode)) {
        int rc = strata_err(err, STRATA_E_ARG, "%s: is %s; strata writes only to a regular file "
                            "(or a new name), never over anything else", path, kind_of(st->st_mode));
        free(*dest);
        *dest = NULL;
        return rc;
    }
    return 0;
}

/* The permission bits a plain fopen(path, "w") would give a new file. */
static mode_t default_mode(void)
{
    /* umask can only be read by setting it: put it straight back (the
     * writers run on the CLI's main thread, nobody creates files meanwhile) */
    mode_t um = umask(022);
    umask(um);
    return 0666 & ~um;
}

int safe_write_open(safe_write *sw, const char *path, strata_error *err)
{
    memset(sw, 0, sizeof *sw);
    if (!path || !*path)
        return strata_err(err, STRATA_E_ARG, "no output file given");
    struct stat st;
    int exists = 0;
    char *dest = NULL;
    int rc = resolve(path, &dest, &exists, &st, err);
    if (rc)
        return rc;
    /* The temporary: a short random name in the destination's directory, so
     * that a destination name of up to NAME_MAX bytes still works. */
    const char *slash = strrchr(dest, '/');
    size_t dlen = slash ? (size_t)(slash - dest) + 1 : 0;
    static const char pattern[] = ".strata-XXXXXX";
    char *tmp = malloc(dlen + sizeof pattern);
    if (!tmp) {
        free(dest);
        return strata_err(err, STRATA_E_NOMEM, "%s: out of memory", path);
    }
    memcpy(tmp, dest, dlen);
    memcpy(tmp + dlen, pattern, sizeof pattern);
    int fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL, mode 0600 */
    if (fd < 0) {
        int e = errno;
        free(tmp);
        free(dest);
        return strata_err(err, STRATA_E_IO, "%s: cannot create a temporary file beside it: %s",
                          path, strerror(e));
    }
    /* The new file gets the old one's permissions, or a new file's. */
    if (fchmod(fd, exists ? (st.st_mode & 07777) : default_mode()) != 0 ||
        !(sw->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        free(dest);
        return strata_err(err, STRATA_E_IO, "%s: cannot prepare the temporary file: %s", path,
                          strerror(e));
    }
    sw->name = path;
    sw->dest = dest;
    sw->tmp = tmp;
    return 0;
}

void safe_write_abort(safe_write *sw)
{
    if (sw->f)
        fclose(sw->f);
    if (sw->tmp)
        unlink(sw->tmp);
    free(sw->tmp);
    free(sw->dest);
    memset(sw, 0, sizeof *sw);
}

/* Make the rename itself durable (best effort: some file systems refuse
 * fsync on a directory). */
static void sync_dir(const char *dest)
{
    const char *slash = strrchr(dest, '/');
    char dir[PATH_MAX];
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dest)
        strcpy(dir, "/");
    else if ((size_t)(slash - dest) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - dest), dest);
    else
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int safe_write_commit(safe_write *sw, int ok, int errno_hint, strata_error *err)
{
    const char *name = sw->name ? sw->name : "?";
    if (!sw->f)
        return strata_err(err, STRATA_E_ARG, "%s: nothing open to commit", name);
    int e = errno_hint;
    /* fsync before rename: the rename must not become visible before the
     * data, or a crash leaves a truncated file under the final name. */
    if (ok && (fflush(sw->f) != 0 || fsync(fileno(sw->f)) != 0)) {
        e = errno;
        ok = 0;
    }
    if (fclose(sw->f) != 0 && ok) {
        e = errno;
        ok = 0;
    }
    sw->f = NULL;
    if (!ok) {
        int rc = strata_err(err, STRATA_E_IO, "%s: write failed: %s", name,
                            e ? strerror(e) : "unknown error");
        safe_write_abort(sw);
        return rc;
    }
    /* The destination may have changed while the data was written: never
     * rename over anything that is not (or no longer) a regular file. */
    struct stat st;
    if (lstat(sw->dest, &st) == 0 && !S_ISREG(st.st_mode)) {
        int rc = strata_err(err, STRATA_E_ARG, "%s: became %s while it was written; left "
                            "untouched", name, kind_of(st.st_mode));
        safe_write_abort(sw);
        return rc;
    }
    if (rename(sw->tmp, sw->dest) != 0) {
        int rc = strata_err(err, STRATA_E_IO, "%s: cannot replace: %s", name, strerror(errno));
        safe_write_abort(sw);
        return rc;
    }
    sync_dir(sw->dest);
    free(sw->tmp);
    sw->tmp = NULL; /* renamed: nothing to unlink */
    safe_write_abort(sw);
    return 0;
}
