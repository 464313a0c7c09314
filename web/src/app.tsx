/** The shell: navigation, the feed's state, sign-in and sign-out, and the page for the route. */
import { useEffect, useRef, useState } from 'preact/hooks';
import { currentKey, needsSignIn, onAuthChange, signOut } from './api';
import { feed, type FeedStatus } from './feed';
import { DeadLetters } from './pages/dead-letters';
import { JobDetail } from './pages/job-detail';
import { Jobs } from './pages/jobs';
import { Overview } from './pages/overview';
import { SignIn } from './pages/sign-in';
import { Submit } from './pages/submit';
import { useRoute } from './router';

const NAV = [
  { path: '/', label: 'Overview' },
  { path: '/jobs', label: 'Jobs' },
  { path: '/dead-letters', label: 'Dead letters' },
  { path: '/submit', label: 'Submit' },
];

export function App() {
  const route = useRoute();
  const [signInNeeded, setSignInNeeded] = useState(needsSignIn());
  const [feedStatus, setFeedStatus] = useState<FeedStatus>(feed.status);
  const [hasKey, setHasKey] = useState(currentKey() !== null);
  // An admin looking at another tenant's jobs: the feed follows that tenant while the jobs pages
  // show it (set before the feed first starts, below).
  const viewTenant = route.path === '/jobs' || route.path.startsWith('/jobs/') ? route.params.get('tenant') || null : null;
  useEffect(() => feed.setTenant(viewTenant), [viewTenant]);

  useEffect(() => {
    const offAuth = onAuthChange(() => {
      setSignInNeeded(needsSignIn());
      setHasKey(currentKey() !== null);
      if (needsSignIn()) feed.stop();
      else feed.start();
    });
    const offStatus = feed.onStatus(setFeedStatus);
    // The page loads at once; its first read answering 401 turns it into the sign-in form.
    feed.start();
    return () => {
      offAuth();
      offStatus();
      feed.stop();
    };
  }, []);

  // Move focus to the new page's heading, so keyboard and screen-reader users land on it.
  const firstRender = useRef(true);
  useEffect(() => {
    if (firstRender.current) {
      firstRender.current = false;
      return;
    }
    // Only when focus is nowhere or on the navigation: a page's own links and buttons keep it.
    const active = document.activeElement;
    if (active && active !== document.body && !active.closest('header')) return;
    const target = document.querySelector<HTMLElement>('main h1') ?? document.getElementById('main');
    if (!target) return;
    if (target.tabIndex < 0 && target.tagName === 'H1') target.tabIndex = -1;
    target.focus({ preventScroll: true });
  }, [route.path]);

  const section = route.path === '/' ? '/' : `/${route.path.split('/')[1] ?? ''}`;
  let page: preact.JSX.Element;
  if (signInNeeded) page = <SignIn />;
  else if (route.path === '/') page = <Overview />;
  else if (route.path === '/jobs') page = <Jobs route={route} />;
  else if (route.path.startsWith('/jobs/')) page = <JobDetail id={decodeURIComponent(route.path.slice('/jobs/'.length))} tenant={viewTenant} />;
  else if (route.path === '/dead-letters') page = <DeadLetters />;
  else if (route.path === '/submit') page = <Submit />;
  else page = <p>No such page.</p>;

  return (
    <>
      {/* A button, not a #main link: the hash holds the route. */}
      <button type="button" class="skip" onClick={() => document.getElementById('main')?.focus()}>
        Skip to content
      </button>
      <header class="top">
        <span class="brand">Longhaul</span>
        <nav aria-label="Main">
          <ul>
            {NAV.map((n) => (
              <li key={n.path}>
                <a href={`#${n.path}`} aria-current={section === n.path ? 'page' : undefined}>
                  {n.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <span class={`feed feed-${feedStatus}`} role="status" aria-live="polite" data-testid="feed-status">
          {feedStatus === 'live' ? 'live' : feedStatus === 'connecting' ? 'connecting…' : 'offline'}
        </span>
        {hasKey && !signInNeeded ? (
          <button type="button" class="link" onClick={() => signOut()}>
            Sign out
          </button>
        ) : null}
      </header>
      <main id="main" tabIndex={-1}>{page}</main>
    </>
  );
}
