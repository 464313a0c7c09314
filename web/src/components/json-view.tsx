/** Untrusted JSON (job inputs, metadata, results, checkpoints) shown as text, never as markup. */
import { json } from '../format';

export function JsonView({ value, label }: { value: unknown; label: string }) {
  if (value === null || value === undefined) return <p class="muted">none</p>;
  return (
    <pre class="json" data-label={label}>
      {json(value)}
    </pre>
  );
}
