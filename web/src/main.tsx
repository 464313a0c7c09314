/** The dashboard's entry point (built by Vite into dist/web; served by src/server/dashboard.ts). */
import { render } from 'preact';
import { App } from './app';
import './styles.css';

const root = document.getElementById('app');
if (root) render(<App />, root);
