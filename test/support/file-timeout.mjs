/**
 * The per-file time limit of `npm test`, loaded with `--import` into every test file's process.
 *
 * `--test-timeout` fails a hung test, by name, but it does not bound a test file: a file whose
 * tests have all ended while something it opened (a server, a child process, a timer) keeps its
 * process alive would hold the run, and CI, until CI's own limit. Here, a file still running
 * after LONGHAUL_TEST_FILE_TIMEOUT_MS (300 s; the longest file takes about 65 s) prints its name
 * and what keeps it alive, and exits 1, which the runner reports as that file failing.
 * (`--test-force-exit` would end such a process too, but it also ends a file before the tests
 * it registers after an `await` have run: whole suites went missing with it, silently.)
 *
 * Only in the processes the runner starts for test files (NODE_TEST_CONTEXT is set there), not
 * in the runner itself. The timer is unref'd: it never keeps a process alive by itself.
 */
const limitMs = Number(process.env.LONGHAUL_TEST_FILE_TIMEOUT_MS ?? 300_000);

if (process.env.NODE_TEST_CONTEXT && limitMs > 0) {
  const file = process.argv[1] ?? '(unknown file)';
  const timer = setTimeout(() => {
    process.stderr.write(
      `\n${file}: still running after ${limitMs / 1000} s, the per-file limit of npm test; ` +
        `alive: ${process.getActiveResourcesInfo().join(', ') || 'nothing'}\n`,
    );
    process.exit(1);
  }, limitMs);
  timer.unref();
}
