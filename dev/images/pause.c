/*
 * pause: the PID 1 of every pod sandbox in the rkubelet dev runtime.
 *
 * Owns: nothing but the pod's namespaces, which it keeps alive by existing.
 * Receives: SIGCHLD (reaps every exited child, since it is the pod's init when
 * the PID namespace is shared), SIGTERM/SIGINT (exits 0).
 * Emits: exit status 0 on SIGTERM/SIGINT; a one-line message on stderr for
 * unexpected failures.
 *
 * Built by dev/runtime.sh with `gcc -static -Os -s` into the image
 * registry.k8s.io/pause:3.10.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    int saved = errno;
    (void)sig;
    /* Reap every child that has exited; never block. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int install(int sig, void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("pause (rkubelet dev) 3.10");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }
    if (install(SIGINT, on_stop) != 0 || install(SIGTERM, on_stop) != 0 ||
        install(SIGCHLD, on_child) != 0) {
        fprintf(stderr, "pause: sigaction failed: %s\n", strerror(errno));
        return 1;
    }
    for (;;) {
        pause();
    }
    /* not reached */
    return 42;
}
