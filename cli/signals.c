/* signals.c: the SIGBUS handler for truncated model files, and the test
 * pause inside a load (see signals.h). */
#include "cli/signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/gguf.h"

static void say(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(2, s, n);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

/* The weights are mmapped: when the file shrinks under the mapping, a read
 * of a page past its new end raises SIGBUS.  Only async-signal-safe calls
 * here (write, _exit, sigaction). */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const char *path = gguf_mapped_file_at(si->si_addr);
    if (!path) {
        /* not ours: fall back to the default action, which the faulting
         * instruction raises again on return */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(sig, &sa, NULL);
        return;
    }
    say("\nstrata-cli: model file ");
    say(path);
    say(" changed on disk while in use (it was truncated or rewritten); stopping\n");
    _exit(CLI_EXIT_MODEL_CHANGED);
}

void cli_install_sigbus(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void cli_test_pause_in_load(void)
{
    const char *f = getenv("STRATA_TEST_PAUSE_IN_LOAD");
    if (!f || !*f)
        return;
    int fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    close(fd);
    struct timespec ts = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 6000 && access(f, F_OK) == 0; i++)
        nanosleep(&ts, NULL); /* EINTR (a Ctrl-C) just shortens one wait */
}
