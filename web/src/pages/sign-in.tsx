/** Sign-in with an API key (when the server has LONGHAUL_API_KEYS): the key's tenant is all the dashboard shows. */
import { useState } from 'preact/hooks';
import { signIn } from '../api';

export function SignIn() {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  return (
    <section class="sign-in" aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Sign in</h1>
      <p>This server requires an API key. The dashboard shows the jobs of the key's tenant only.</p>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          const key = String(new FormData(e.currentTarget).get('key') ?? '').trim();
          if (!key) return setError('Enter an API key.');
          setBusy(true);
          setError(null);
          try {
            await signIn(key);
          } catch (err) {
            setError((err as Error).message);
          } finally {
            setBusy(false);
          }
        }}
      >
        <div class="field">
          <label for="api-key">API key</label>
          <input id="api-key" name="key" type="password" autoComplete="current-password" required aria-describedby={error ? 'sign-in-error' : undefined} />
        </div>
        {error ? (
          <p id="sign-in-error" role="alert">
            {error}
          </p>
        ) : null}
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
      <p class="help">The key is kept in this browser tab only (session storage) and sent in the Authorization header, never in a URL.</p>
    </section>
  );
}
