/* The pod sandbox's process (the "pause" container): holds the pod's namespaces open, reaps the
 * zombies that PID 1 inherits, and exits on SIGINT/SIGTERM. Built statically by
 * scripts/kind-node-image.sh because the upstream pause image cannot be pulled here. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_exit_signal(int sig) { _exit(sig == SIGTERM || sig == SIGINT ? 0 : 2); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("shardcdc pause");
    return 0;
  }
  if (getpid() != 1) fprintf(stderr, "pause: warning: not PID 1\n");
  struct sigaction exit_action = {.sa_handler = on_exit_signal};
  struct sigaction child_action = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &exit_action, NULL) < 0 || sigaction(SIGTERM, &exit_action, NULL) < 0 ||
      sigaction(SIGCHLD, &child_action, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
